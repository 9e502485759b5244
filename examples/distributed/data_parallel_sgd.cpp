// Data-parallel minibatch SGD of a small MLP (two tanh hidden layers) on synthetic data, the
// way d2l.ai's multi-GPU chapter trains: each rank computes the gradients on its shard of
// every global batch, the gradients are averaged across ranks with
// dist::all_reduce(reduce_op::avg), and every rank takes the same step.
//
// Each layer's all-reduce is issued as soon as its gradient is, during the backward pass, and
// returns at once: the engine runs it while the next layer's gradients are computed, as
// MXNet's kvstore and Horovod do. --no-overlap waits for each all-reduce before going on, to
// show what that overlap gains.
//
// At the end it checks that every rank holds the same weights (all_gather) and that the loss
// per epoch matches one process training on the whole global batch, then prints the time per
// epoch (rank 0).
//
// On one machine:       mpirun -np 2 ./data_parallel_sgd [--no-overlap] [--epochs N]
//                       [--device cpu|cuda]   (cuda: a GPU per rank, collectives on NCCL)
// On two hosts a and b: mpirun -H a,b -np 2 ./data_parallel_sgd   (the same binary and path
//                       on both; see docs/distributed.md)
#include <cotensor/cotensor.hpp>
#include <cotensor/distributed.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace cotensor;
namespace dist = cotensor::dist;

constexpr int features = 32;
constexpr int hidden = 256;
constexpr int global_batch = 384;  // divides by 1, 2, 3, 4, 6 and 8 ranks
constexpr int steps_per_epoch = 16;
constexpr int samples = global_batch * steps_per_epoch;
constexpr float learning_rate = 0.05F;

// A fixed-seed generator: the same data and initial weights on every rank.
class lcg {
public:
  explicit lcg(std::uint64_t seed) : state_(seed) {}
  float uniform() {  // in [-1, 1)
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>(state_ >> 40) / static_cast<float>(1ULL << 23) - 1.0F;
  }

private:
  std::uint64_t state_;
};

// y = sin(x . a) + x_0 x_1 / 2 + noise: not linear, so the hidden layers have work to do.
struct dataset {
  std::vector<float> x;  // samples x features
  std::vector<float> y;  // samples
};

dataset make_data() {
  lcg g(42);
  dataset d;
  std::vector<float> a(features);
  for (auto& v : a) {
    v = g.uniform() * 0.5F;
  }
  for (int i = 0; i < samples; ++i) {
    float dot = 0;
    float first[2] = {};
    for (int f = 0; f < features; ++f) {
      const float v = g.uniform();
      d.x.push_back(v);
      dot += v * a[static_cast<std::size_t>(f)];
      if (f < 2) {
        first[f] = v;
      }
    }
    d.y.push_back(std::sin(dot) + 0.5F * first[0] * first[1] + 0.01F * g.uniform());
  }
  return d;
}

// Rows [first, first + count) as an X tensor and a y tensor on `where`.
std::pair<tensor, tensor> rows(const dataset& d, int first, int count, device where) {
  const auto begin = static_cast<std::ptrdiff_t>(first);
  std::vector<float> x(d.x.begin() + begin * features, d.x.begin() + (begin + count) * features);
  std::vector<float> y(d.y.begin() + begin, d.y.begin() + begin + count);
  return {from_vector(std::move(x), {count, features}, where),
          from_vector(std::move(y), {count, 1}, where)};
}

struct mlp {
  tensor w1, b1, w2, b2, w3, b3;

  std::vector<tensor*> parameters() { return {&w1, &b1, &w2, &b2, &w3, &b3}; }
};

// Uniform in ±1/sqrt(fan_in), the same on every rank; biases zero. On `where`.
mlp make_mlp(device where) {
  lcg g(7);
  auto weight = [&g, where](int in, int out) {
    std::vector<float> v(static_cast<std::size_t>(in) * static_cast<std::size_t>(out));
    const float scale = 1.0F / std::sqrt(static_cast<float>(in));
    for (auto& e : v) {
      e = g.uniform() * scale;
    }
    return from_vector(std::move(v), {in, out}, where);
  };
  return {weight(features, hidden), zeros({hidden}, where), weight(hidden, hidden),
          zeros({hidden}, where),   weight(hidden, 1),      zeros({1}, where)};
}

// One step on (x, y): forward, backward, and the update by the gradients that `reduce` returns
// for each parameter's gradient (an all-reduce, or nothing). Returns the batch's mean squared
// error, as a tensor still being computed.
template <class Reduce>
tensor step(mlp& net, const tensor& x, const tensor& y, Reduce reduce) {
  const tensor h1 = tanh(matmul(x, net.w1) + net.b1);
  const tensor h2 = tanh(matmul(h1, net.w2) + net.b2);
  const tensor err = matmul(h2, net.w3) + net.b3 - y;
  tensor loss = mean(err * err);

  // Backward, from the last layer: each gradient goes to `reduce` as soon as it is issued.
  const float batch = static_cast<float>(x.shape()[0]);
  const tensor d_out = err * (2.0F / batch);
  tensor g_w3 = reduce(matmul(transpose(h2), d_out));
  tensor g_b3 = reduce(sum(d_out, 0));
  const tensor d_z2 = matmul(d_out, transpose(net.w3)) * (1.0F - h2 * h2);
  tensor g_w2 = reduce(matmul(transpose(h1), d_z2));
  tensor g_b2 = reduce(sum(d_z2, 0));
  const tensor d_z1 = matmul(d_z2, transpose(net.w2)) * (1.0F - h1 * h1);
  tensor g_w1 = reduce(matmul(transpose(x), d_z1));
  tensor g_b1 = reduce(sum(d_z1, 0));

  // The engine orders each update after the all-reduce of its gradient and after every read
  // of the old weights above.
  net.w3 -= g_w3 * learning_rate;
  net.b3 -= g_b3 * learning_rate;
  net.w2 -= g_w2 * learning_rate;
  net.b2 -= g_b2 * learning_rate;
  net.w1 -= g_w1 * learning_rate;
  net.b1 -= g_b1 * learning_rate;
  return loss;
}

struct options {
  bool overlap = true;
  int epochs = 5;
  bool gpu = false;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-overlap") == 0) {
      o.overlap = false;
    } else if (std::strcmp(argv[i], "--epochs") == 0 && i + 1 < argc) {
      o.epochs = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      const std::string d = argv[++i];
      o.gpu = d == "cuda";
      if (!o.gpu && d != "cpu") {
        o.epochs = 0;  // the usage below
        break;
      }
    } else {
      o.epochs = 0;  // unknown: the usage below
      break;
    }
  }
  if (o.epochs < 2) {
    std::fprintf(
        stderr,
        "usage: data_parallel_sgd [--no-overlap] [--epochs N (>= 2)] [--device cpu|cuda]\n");
    std::exit(2);
  }
  return o;
}

float max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(a[i] - b[i]) / (1.0F + std::fabs(b[i])));
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  const options opts = parse(argc, argv);
  const auto world = dist::communicator::world();
  const int rank = world.rank();
  const int size = world.size();
  if (global_batch % size != 0) {
    std::fprintf(stderr, "the global batch of %d does not divide by %d ranks\n", global_batch,
                 size);
    return 1;
  }
  // --device cuda: each rank on a GPU of its machine (NCCL takes one rank per GPU).
  device where = device::cpu();
  if (opts.gpu) {
    if (cuda_device_count() == 0) {
      std::fprintf(stderr, "rank %d: no usable GPU: %s\n", rank,
                   unavailable_reason(device::cuda(0)).c_str());
      return 1;
    }
    where = device::cuda(rank % cuda_device_count());
  }
  const dataset data = make_data();
  const int shard = global_batch / size;

  // Data-parallel: this rank's replica, its shard of each global batch, averaged gradients.
  mlp net = make_mlp(where);
  auto all_reduce_avg = [&opts](tensor g) {
    dist::all_reduce(g, dist::reduce_op::avg);
    if (!opts.overlap) {
      g.wait();
    }
    return g;
  };
  std::vector<float> losses;
  std::vector<double> seconds;
  for (int epoch = 0; epoch < opts.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    tensor epoch_loss = zeros({}, where);
    for (int first = 0; first < samples; first += global_batch) {
      auto [x, y] = rows(data, first + rank * shard, shard, where);
      tensor loss = step(net, x, y, all_reduce_avg);
      dist::all_reduce(loss, dist::reduce_op::avg);  // the global batch's loss
      epoch_loss += loss;
    }
    losses.push_back(epoch_loss.item() / steps_per_epoch);  // waits for this epoch's loss
    wait_all();                                             // and its last step
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (rank == 0) {
      std::printf("epoch %d: loss %.6f, %.3f s\n", epoch, static_cast<double>(losses.back()),
                  seconds.back());
    }
  }

  // The same training in one process, on whole global batches, for the check.
  mlp single = make_mlp(where);
  std::vector<float> single_losses;
  for (int epoch = 0; epoch < opts.epochs; ++epoch) {
    tensor epoch_loss = zeros({}, where);
    for (int first = 0; first < samples; first += global_batch) {
      auto [x, y] = rows(data, first, global_batch, where);
      epoch_loss += step(single, x, y, [](tensor g) { return g; });
    }
    single_losses.push_back(epoch_loss.item() / steps_per_epoch);
  }

  // Every rank holds the same weights, and they are close to those of one process.
  bool ok = true;
  const auto params = net.parameters();
  const auto single_params = single.parameters();
  float weight_difference = 0;
  for (std::size_t p = 0; p < params.size(); ++p) {
    const auto mine = params[p]->to_vector();
    const auto all = dist::all_gather(*params[p]).to_vector();
    for (int r = 0; r < size; ++r) {
      const auto theirs =
          std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(r * mine.size()),
                             all.begin() + static_cast<std::ptrdiff_t>((r + 1) * mine.size()));
      if (theirs != mine) {
        std::fprintf(stderr, "rank %d: parameter %zu differs from rank %d's\n", rank, p, r);
        ok = false;
      }
    }
    weight_difference =
        std::max(weight_difference, max_relative_difference(mine, single_params[p]->to_vector()));
  }
  const float loss_difference = max_relative_difference(losses, single_losses);
  constexpr float tolerance = 1e-3F;  // float sums in another order, over every step
  if (weight_difference > tolerance || loss_difference > tolerance) {
    std::fprintf(stderr,
                 "rank %d: differs from one process: weights by %g, loss by %g (relative; "
                 "tolerance %g)\n",
                 rank, static_cast<double>(weight_difference), static_cast<double>(loss_difference),
                 static_cast<double>(tolerance));
    ok = false;
  }
  if (losses.back() >= losses.front()) {
    std::fprintf(stderr, "rank %d: the loss did not go down\n", rank);
    ok = false;
  }
  if (rank == 0) {
    std::vector<double> later(seconds.begin() + 1, seconds.end());  // after the first epoch
    std::sort(later.begin(), later.end());
    std::printf("time per epoch (median after the first): %.4f s, overlap %s\n",
                later[later.size() / 2], opts.overlap ? "on" : "off");
    if (ok) {
      std::printf("%d ranks agree; one process differs by %.2g in the weights and %.2g in the "
                  "loss (relative)\n",
                  size, static_cast<double>(weight_difference),
                  static_cast<double>(loss_difference));
    }
  }
  return ok ? 0 : 1;
}
