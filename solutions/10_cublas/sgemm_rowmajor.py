# cublasSgemm(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc) for the row-major
# c (m x n) = a (m x k) @ b (k x n), whose rows are lda, ldb and ldc floats apart.
# cuBLAS reads a row-major matrix as the column-major storage of its transpose, so it is asked for
# c^T = b^T @ a^T: b first, neither transposed, our m and n swapped, each ld the row pitch.
{
    # BEGIN SOLUTION
    "transa": "N", "transb": "N",
    "m": "n", "n": "m", "k": "k",
    "A": "b", "lda": "ldb",
    "B": "a", "ldb": "lda",
    "ldc": "ldc",
    # END SOLUTION
}
