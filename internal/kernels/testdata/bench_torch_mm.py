# Side-by-side reference for `gotrain bench gemm`: torch.mm (OpenBLAS) at the
# same shapes, one thread. Run with Debian's interpreter and the best OpenBLAS
# kernels:
#   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 \
#     OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench_torch_mm.py
import timeit, torch
torch.set_num_threads(1)
cases = [
 (512,512,512,"NN"),(1024,1024,1024,"NN"),
 (64,512,784,"NT"),(64,512,512,"NT"),(64,10,512,"NT"),
 (512,784,64,"TN"),(64,784,512,"NN"),
 (64,576,288,"NN"),(64,288,576,"NT"),(288,576,64,"TN"),(32,676,9,"NN"),
]
for m,n,k,t in cases:
    a = torch.randn(k,m).t() if t[0]=="T" else torch.randn(m,k)
    b = torch.randn(n,k).t() if t[1]=="T" else torch.randn(k,n)
    c = torch.empty(m,n)
    f = lambda: torch.mm(a,b,out=c)
    f()
    n_it = max(3, int(2e9/(2*m*n*k)))
    best = min(timeit.repeat(f, number=n_it, repeat=5))/n_it
    print(f"m={m} n={n} k={k} trans={t} gflops={2*m*n*k/best/1e9:.1f}")
