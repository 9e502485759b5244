// Data-parallel minibatch SGD of a linear regression: each rank trains on its shard of every
// global batch, the gradients are averaged with dist::all_reduce(reduce_op::avg), and every
// rank takes the same step. Checks that the weights agree across ranks (all_gather) and that
// the loss matches one process training on the whole global batch.
//
// On one machine:       mpirun -np 2 ./data_parallel_sgd
// On two hosts a and b: mpirun -H a,b -np 2 ./data_parallel_sgd   (the same binary on both)
// --no-overlap waits for each all-reduce before going on (no overlap of communication with
// the compute issued after it).
#include <cotensor/cotensor.hpp>
#include <cotensor/distributed.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

using namespace cotensor;
namespace dist = cotensor::dist;

constexpr int features = 8;
constexpr int samples = 600;
constexpr int global_batch = 60;  // divides by 1, 2, 3, 4, 5, 6
constexpr int epochs = 5;
constexpr float learning_rate = 0.05F;

// The same synthetic data on every rank: y = X w* + noise, from a fixed-seed generator.
struct dataset {
  std::vector<float> x;  // samples x features
  std::vector<float> y;  // samples
};

dataset make_data() {
  std::uint64_t state = 42;
  auto uniform = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>(state >> 40) / static_cast<float>(1ULL << 24) - 0.5F;
  };
  dataset d;
  for (int i = 0; i < samples * features; ++i) {
    d.x.push_back(uniform() * 2.0F);
  }
  for (int i = 0; i < samples; ++i) {
    float y = 0;
    for (int f = 0; f < features; ++f) {
      y += d.x[static_cast<std::size_t>(i * features + f)] * static_cast<float>(f + 1) * 0.5F;
    }
    d.y.push_back(y + 0.01F * uniform());
  }
  return d;
}

// Rows [first, first + rows) as an X tensor and a y tensor.
std::pair<tensor, tensor> rows(const dataset& d, int first, int rows) {
  const auto begin = static_cast<std::ptrdiff_t>(first);
  std::vector<float> x(d.x.begin() + begin * features, d.x.begin() + (begin + rows) * features);
  std::vector<float> y(d.y.begin() + begin, d.y.begin() + begin + rows);
  return {from_vector(std::move(x), {rows, features}), from_vector(std::move(y), {rows, 1})};
}

// One step's mean squared error and its gradient with respect to w, on (x, y).
std::pair<tensor, tensor> loss_and_gradient(const tensor& x, const tensor& y, const tensor& w) {
  tensor err = matmul(x, w) - y;
  tensor loss = mean(err * err);
  tensor grad = matmul(transpose(x), err) * (2.0F / static_cast<float>(x.shape()[0]));
  return {loss, grad};
}

}  // namespace

int main(int argc, char** argv) {
  bool overlap = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-overlap") == 0) {
      overlap = false;
    }
  }
  const auto world = dist::communicator::world();
  const int rank = world.rank();
  const int size = world.size();
  if (global_batch % size != 0) {
    std::fprintf(stderr, "the global batch of %d does not divide by %d ranks\n", global_batch,
                 size);
    return 1;
  }
  const dataset data = make_data();
  const int shard = global_batch / size;

  tensor w = zeros({features, 1});    // this rank's replica
  tensor ref = zeros({features, 1});  // one process on the whole global batch, for the check
  std::vector<float> losses;
  std::vector<float> ref_losses;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    tensor epoch_loss = zeros({1});
    tensor ref_epoch_loss = zeros({1});
    for (int start = 0; start < samples; start += global_batch) {
      auto [x, y] = rows(data, start + rank * shard, shard);
      auto [loss, grad] = loss_and_gradient(x, y, w);
      dist::all_reduce(grad, dist::reduce_op::avg);  // the global batch's mean gradient
      dist::all_reduce(loss, dist::reduce_op::avg);
      if (!overlap) {
        grad.wait();
      }
      w -= grad * learning_rate;
      epoch_loss += reshape(loss, {1});

      auto [gx, gy] = rows(data, start, global_batch);
      auto [ref_loss, ref_grad] = loss_and_gradient(gx, gy, ref);
      ref -= ref_grad * learning_rate;
      ref_epoch_loss += reshape(ref_loss, {1});
    }
    const float steps = static_cast<float>(samples / global_batch);
    losses.push_back(epoch_loss.item() / steps);
    ref_losses.push_back(ref_epoch_loss.item() / steps);
    if (rank == 0) {
      std::printf("epoch %d: loss %.6f (one process: %.6f)\n", epoch, losses.back(),
                  ref_losses.back());
    }
  }

  // Every rank holds the same weights, and they are those of one process.
  const auto all = dist::all_gather(w).to_vector();
  const auto mine = w.to_vector();
  const auto single = ref.to_vector();
  bool ok = true;
  for (int r = 0; r < size; ++r) {
    for (int f = 0; f < features; ++f) {
      const float theirs = all[static_cast<std::size_t>(r * features + f)];
      const auto i = static_cast<std::size_t>(f);
      if (theirs != mine[i]) {
        std::fprintf(stderr, "rank %d: weight %d differs from rank %d's: %g vs %g\n", rank, f, r,
                     static_cast<double>(mine[i]), static_cast<double>(theirs));
        ok = false;
      }
      if (std::fabs(mine[i] - single[i]) > 1e-4F * (1.0F + std::fabs(single[i]))) {
        std::fprintf(stderr, "rank %d: weight %d is %g, one process has %g\n", rank, f,
                     static_cast<double>(mine[i]), static_cast<double>(single[i]));
        ok = false;
      }
    }
  }
  for (std::size_t e = 0; e < losses.size(); ++e) {
    if (std::fabs(losses[e] - ref_losses[e]) > 1e-4F * (1.0F + ref_losses[e])) {
      std::fprintf(stderr, "rank %d: epoch %zu loss %g, one process %g\n", rank, e,
                   static_cast<double>(losses[e]), static_cast<double>(ref_losses[e]));
      ok = false;
    }
  }
  if (losses.back() >= losses.front()) {
    std::fprintf(stderr, "rank %d: the loss did not go down\n", rank);
    ok = false;
  }
  if (rank == 0 && ok) {
    std::printf("%d ranks agree; the loss matches one process within 1e-4\n", size);
  }
  return ok ? 0 : 1;
}
