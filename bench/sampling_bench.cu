// sampling_bench: microseconds per SampleRows call (kernels/sampling.h) on the GPU, greedy and
// temperature + top_k + top_p, at 1, 64 and 256 rows of vocab 128256 (Llama 3), next to the
// roofline: the logit bytes read once over the device-to-device copy rate measured in this run
// (a 1 GiB cudaMemcpyAsync, read + write bytes).
//
// usage: sampling_bench [JSON_PATH]   (the JSON also goes to stdout's first line)
//
// Each call is captured once in a CUDA graph (which also checks that SampleRows is capturable)
// and replayed; the median of 200 replays, each timed by events, over 4 rotating logit buffers.
// Logits: normal, sigma 3 (a flat row; model rows are peakier, which only helps top-p).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/sampling.h"

namespace {

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
#define CK(expr) Check((expr), #expr)

float MedianMs(std::vector<float> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Read + write bytes per second of a large device-to-device copy.
double CopyBandwidth() {
  const size_t bytes = size_t{1} << 30;
  void *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < 12; ++i) {
    CK(cudaEventRecord(e0));
    CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (i >= 2) ms.push_back(t);
  }
  CK(cudaFree(a));
  CK(cudaFree(b));
  return 2.0 * bytes / (MedianMs(ms) * 1e-3);
}

struct Result {
  std::string mode;
  int rows;
  double us, roofline_us;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln::kernels;
  const int32_t vocab = 128256;
  const int kBuffers = 4;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const double bw = CopyBandwidth();
  std::vector<Result> results;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const char* mode : {"greedy", "t0.8_k50_p0.95"}) {
    for (int rows : {1, 64, 256}) {
      const size_t n = static_cast<size_t>(rows) * vocab;
      std::vector<float> host(n);
      std::vector<float*> logits(kBuffers);
      for (float*& p : logits) {
        for (float& x : host) x = normal(rng);
        CK(cudaMalloc(&p, n * sizeof(float)));
        CK(cudaMemcpy(p, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
      }
      std::vector<SamplingRow> row_params(rows);
      for (int r = 0; r < rows; ++r) {
        SamplingRow& s = row_params[r];
        s.seed = 1234 + r;
        s.rng_position = r;
        if (mode[0] == 't') {
          s.temperature = 0.8f;
          s.top_k = 50;
          s.top_p = 0.95f;
        }
      }
      SamplingRow* d_rows;
      SampledToken* d_out;
      void* ws;
      const size_t ws_bytes = SamplingWorkspaceBytes(rows, vocab);
      CK(cudaMalloc(&d_rows, rows * sizeof(SamplingRow)));
      CK(cudaMalloc(&d_out, rows * sizeof(SampledToken)));
      CK(cudaMalloc(&ws, ws_bytes));
      CK(cudaMemcpy(d_rows, row_params.data(), rows * sizeof(SamplingRow), cudaMemcpyHostToDevice));
      cudaStream_t stream;
      CK(cudaStreamCreate(&stream));
      std::vector<cudaGraphExec_t> graphs(kBuffers);
      for (int b = 0; b < kBuffers; ++b) {
        SamplingInputs in;
        in.logits = logits[b];
        in.logits_stride = vocab;
        in.num_rows = rows;
        in.vocab_size = vocab;
        in.rows = d_rows;
        cudaGraph_t graph;
        CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        CK(SampleRows(in, ws, ws_bytes, d_out, stream));
        CK(cudaStreamEndCapture(stream, &graph));
        CK(cudaGraphInstantiate(&graphs[b], graph, 0));
        CK(cudaGraphDestroy(graph));
      }
      cudaEvent_t e0, e1;
      CK(cudaEventCreate(&e0));
      CK(cudaEventCreate(&e1));
      std::vector<float> ms;
      for (int i = 0; i < 220; ++i) {
        CK(cudaEventRecord(e0, stream));
        CK(cudaGraphLaunch(graphs[i % kBuffers], stream));
        CK(cudaEventRecord(e1, stream));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        if (i >= 20) ms.push_back(t);
      }
      CK(cudaGetLastError());
      const double us = MedianMs(ms) * 1e3;
      results.push_back({mode, rows, us, n * 4.0 / bw * 1e6});
      for (cudaGraphExec_t g : graphs) CK(cudaGraphExecDestroy(g));
      for (float* p : logits) CK(cudaFree(p));
      CK(cudaFree(d_rows));
      CK(cudaFree(d_out));
      CK(cudaFree(ws));
      CK(cudaStreamDestroy(stream));
    }
  }
  std::string json = "{\"bench\":\"sampling\",\"device\":\"" + std::string(prop.name) +
                     "\",\"vocab\":" + std::to_string(vocab) +
                     ",\"copy_bandwidth_gbs\":" + std::to_string(bw / 1e9) + ",\"results\":[";
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    json += (i ? "," : "") + std::string("{\"mode\":\"") + r.mode +
            "\",\"rows\":" + std::to_string(r.rows) + ",\"us\":" + std::to_string(r.us) +
            ",\"roofline_us\":" + std::to_string(r.roofline_us) + "}";
  }
  json += "]}";
  std::printf("%s\n", json.c_str());
  if (argc > 1) {
    if (FILE* f = std::fopen(argv[1], "w")) {
      std::fprintf(f, "%s\n", json.c_str());
      std::fclose(f);
    }
  }
  std::printf("\n%s, copy %.0f GB/s (read+write), vocab %d\n", prop.name, bw / 1e9, vocab);
  std::printf("%-16s %6s %10s %13s %8s\n", "mode", "rows", "us/call", "roofline us", "x roof");
  for (const Result& r : results) {
    std::printf("%-16s %6d %10.1f %13.2f %8.1f\n", r.mode.c_str(), r.rows, r.us, r.roofline_us,
                r.us / r.roofline_us);
  }
  return 0;
}
