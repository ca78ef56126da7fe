# cublasSgemm's arguments for a linear layer, y (m x n) = x (m x k) @ w^T, with the weight w stored
# row-major as (n x k) and rows ldx, ldw and ldy floats apart.
# cuBLAS sees y^T = w @ x^T. The bytes of w are the column-major w^T (k x n), so transa = "T" turns it
# back into w; the bytes of x are already the column-major x^T.
{
    # BEGIN SOLUTION
    "transa": "T", "transb": "N",
    "m": "n", "n": "m", "k": "k",
    "A": "w", "lda": "ldw",
    "B": "x", "ldb": "ldx",
    "ldc": "ldy",
    # END SOLUTION
}
