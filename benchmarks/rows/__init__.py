"""One module per chapter (NN_topic.py), each exposing ``rows(ctx) -> list[Row]``; `table_rows` turns a lesson's
`course.variants` comparison into rows."""


def table_rows(ctx, table, tag: str, targets=None) -> list:
    """One row per line of a `course.variants.compare` table, named ``"<name> (<tag>)"``, each against its anchor
    row of the same table; ``targets``: name -> the ratio to its anchor the row must reach."""
    out = []
    for r in table:
        base = None if r["anchor"] is None else next(x["rate"] for x in table if x["name"] == r["anchor"])
        out.append(ctx.row(f"{r['name']} ({tag})", r["rate"], r["unit"], anchor=r["anchor"] and f"{r['anchor']} ({tag})",
                           anchor_value=base, target=(targets or {}).get(r["name"]), note=r["about"]))
    return out
