// Throwaway check of the wgmma descriptor layouts (not part of the repo).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "kernels/attention_mma.cuh"
#include "kernels/attention_wgmma.cuh"
using namespace kiln::kernels::attention_internal;

__global__ void Probe(const __half* q, const __half* k, const __half* a_rm, float* s_out,
                      float* o_out, uint32_t lbo, uint32_t sbo) {
  extern __shared__ unsigned char raw[];
  uint32_t ra = SmemAddr(raw);
  uint32_t base = (ra + 1023) & ~1023u;
  unsigned char* sm = raw + (base - ra);
  int tid = threadIdx.x;
  // Q 64 rows into [2][64][64] swizzled; K 128 rows [2][128][64]
  for (int c = tid; c < 64 * 16; c += 128) {
    int r = c / 16, ch = c % 16;
    *reinterpret_cast<uint4*>(sm + SwizzledOffset<64>(r, ch)) =
        *reinterpret_cast<const uint4*>(q + r * 128 + ch * 8);
  }
  for (int c = tid; c < 128 * 16; c += 128) {
    int r = c / 16, ch = c % 16;
    *reinterpret_cast<uint4*>(sm + 16384 + SwizzledOffset<128>(r, ch)) =
        *reinterpret_cast<const uint4*>(k + r * 128 + ch * 8);
  }
  FenceProxyAsync();
  __syncthreads();
  float s[16][4];
  float o[16][4];
  for (int j = 0; j < 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  FenceAccumulators(s);
  WgmmaFence();
  for (int kk = 0; kk < 8; ++kk) {
    WgmmaSS<__half>(s, SmemDescSw128(base + (kk / 4) * 8192 + (kk % 4) * 32, 0, 1024),
                    SmemDescSw128(base + 16384 + (kk / 4) * 16384 + (kk % 4) * 32, 0, 1024),
                    kk > 0);
  }
  WgmmaCommit();
  WgmmaWait<0>();
  FenceAccumulators(s);
  int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  for (int j = 0; j < 16; ++j)
    for (int c = 0; c < 4; ++c)
      s_out[(warp * 16 + g + 8 * (c / 2)) * 128 + 8 * j + 2 * t + (c % 2)] = s[j][c];
  // O = A V, A [64][128 keys] row-major given, V = k tile [128 keys][128 dims]
  uint32_t a[8][4];
  for (int kk = 0; kk < 8; ++kk) {
    int r0 = warp * 16 + g;
    auto pk = [&](int r, int col) {
      __half2 h = __halves2half2(a_rm[r * 128 + col], a_rm[r * 128 + col + 1]);
      return *reinterpret_cast<uint32_t*>(&h);
    };
    a[kk][0] = pk(r0, kk * 16 + 2 * t);
    a[kk][1] = pk(r0 + 8, kk * 16 + 2 * t);
    a[kk][2] = pk(r0, kk * 16 + 8 + 2 * t);
    a[kk][3] = pk(r0 + 8, kk * 16 + 8 + 2 * t);
  }
  FenceAccumulators(o);
  WgmmaFence();
  for (int kk = 0; kk < 8; ++kk)
    WgmmaRSTransB<__half>(o, a[kk], SmemDescSw128(base + 16384 + kk * 2048, lbo, sbo));
  WgmmaCommit();
  WgmmaWait<0>();
  FenceAccumulators(o);
  for (int j = 0; j < 16; ++j)
    for (int c = 0; c < 4; ++c)
      o_out[(warp * 16 + g + 8 * (c / 2)) * 128 + 8 * j + 2 * t + (c % 2)] = o[j][c];
}

int main() {
  std::vector<__half> q(64 * 128), k(128 * 128), a(64 * 128);
  std::vector<float> qf(q.size()), kf(k.size()), af(a.size());
  srand(1);
  auto rnd = [] { return (rand() % 17 - 8) / 8.0f; };
  for (size_t i = 0; i < q.size(); ++i) {
    qf[i] = rnd();
    q[i] = __float2half(qf[i]);
  }
  for (size_t i = 0; i < k.size(); ++i) {
    kf[i] = rnd();
    k[i] = __float2half(kf[i]);
  }
  for (size_t i = 0; i < a.size(); ++i) {
    af[i] = rnd();
    a[i] = __float2half(af[i]);
  }
  __half *dq, *dk, *da;
  float *ds, *dob;
  cudaMalloc(&dq, q.size() * 2);
  cudaMalloc(&dk, k.size() * 2);
  cudaMalloc(&da, a.size() * 2);
  cudaMalloc(&ds, 64 * 128 * 4);
  cudaMalloc(&dob, 64 * 128 * 4);
  cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, k.data(), k.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaFuncSetAttribute(Probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 60000);
  uint32_t variants[2][2] = {{16384, 1024}, {1024, 16384}};
  for (auto& v : variants) {
    cudaMemset(ds, 0, 64 * 128 * 4);
    cudaMemset(dob, 0, 64 * 128 * 4);
    Probe<<<1, 128, 60000>>>(dq, dk, da, ds, dob, v[0], v[1]);
    cudaError_t e = cudaDeviceSynchronize();
    std::vector<float> s(64 * 128), o(64 * 128);
    cudaMemcpy(s.data(), ds, s.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(o.data(), dob, o.size() * 4, cudaMemcpyDeviceToHost);
    double es = 0, eo = 0;
    for (int i = 0; i < 64; ++i)
      for (int j = 0; j < 128; ++j) {
        double rs = 0, ro = 0;
        for (int d = 0; d < 128; ++d) {
          rs += qf[i * 128 + d] * kf[j * 128 + d];
          ro += af[i * 128 + d] * kf[d * 128 + j];
        }
        es = fmax(es, fabs(rs - s[i * 128 + j]));
        eo = fmax(eo, fabs(ro - o[i * 128 + j]));
      }
    printf("{\"err\": \"%s\", \"lbo\": %u, \"sbo\": %u, \"s_maxerr\": %g, \"o_maxerr\": %g}\n",
           cudaGetErrorString(e), v[0], v[1], es, eo);
  }
}
