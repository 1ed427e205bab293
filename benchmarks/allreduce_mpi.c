/* Allreduce benchmark, the peer: Open MPI's MPI_Allreduce, measured exactly like
 * allreduce_bench.c (same sizes, warm-up, iteration rule, slowest rank's mean, output format).
 * Built by benchmarks/allreduce.sh with mpicc; run with mpirun. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    size_t min = 4 << 10, max = 64 << 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--min") && i + 1 < argc)
            min = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc)
            max = strtoull(argv[++i], NULL, 10);
    }
    int n, r, bad = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    size_t maxn = max / 4;
    float *a = malloc(maxn * 4 + 64), *b = malloc(maxn * 4 + 64);
    for (size_t i = 0; i < maxn; i++)
        a[i] = (float)((i + (size_t)r) % 8);
    if (r == 0)
        printf("# Open MPI MPI_Allreduce, %d ranks, fp32 sum, out-of-place\n", n);
    for (size_t bytes = min; bytes <= max; bytes *= 4) {
        int count = (int)(bytes / 4);
        MPI_Allreduce(a, b, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(a, b, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int k = 0; k < 3; k++)
            MPI_Allreduce(a, b, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double est = (MPI_Wtime() - t0) / 3, iters_d = est > 0 ? 0.25 / est : 1000;
        MPI_Bcast(&iters_d, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        int iters = iters_d < 5 ? 5 : iters_d > 2000 ? 2000 : (int)iters_d;
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (int it = 0; it < iters; it++)
            MPI_Allreduce(a, b, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t = (MPI_Wtime() - t0) / iters;
        MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        for (int i = 0; i < count && !bad; i++) {
            float want = 0;
            for (int q = 0; q < n; q++)
                want += (float)(((size_t)i + (size_t)q) % 8);
            bad = b[i] != want;
        }
        double algbw = (double)bytes / t / 1e9, busbw = algbw * 2.0 * (n - 1) / n;
        if (r == 0)
            printf("%zu %d %.2f %.3f %.3f\n", bytes, iters, t * 1e6, algbw, busbw);
        fflush(stdout);
    }
    if (bad)
        fprintf(stderr, "allreduce_mpi: rank %d: WRONG RESULT\n", r);
    free(a);
    free(b);
    MPI_Finalize();
    return bad;
}
