// Built against the *installed* cotensor::serving: a model of our own, served by the protocol's
// handler, and Boost.JSON compiled here too (the library's own copy is hidden, so the two never
// meet).
#include <cotensor/cotensor.hpp>
#include <cotensor/serving.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <boost/json/src.hpp>

#include <cstdio>

namespace {

// y = 2x over FP32 rows of 3.
class twice final : public cotensor::serving::model {
public:
  twice() {
    config_.name = "twice";
    config_.max_batch_size = 4;
    config_.inputs = {{"X", cotensor::dtype::float32, {3}}};
    config_.outputs = {{"Y", cotensor::dtype::float32, {3}}};
    config_.dynamic_batching = cotensor::serving::dynamic_batching_config{};
  }
  const cotensor::serving::model_config& config() const noexcept override { return config_; }
  std::vector<cotensor::tensor> forward(const std::vector<cotensor::tensor>& in) const override {
    return {in.at(0) * 2.0F};
  }

private:
  cotensor::serving::model_config config_;
};

}  // namespace

int main() {
  namespace asio = cotensor::asio;
  namespace http = boost::beast::http;
  cotensor::serving::model_repository models;
  models.add(std::make_shared<twice>());
  asio::io_context io;
  cotensor::serving::handler v2(io.get_executor(), models);
  cotensor::serving::handler::request req{http::verb::post, "/v2/models/twice/infer", 11};
  req.body() = R"({"id": "c", "inputs": [{"name": "X", "datatype": "FP32", "shape": [2, 3],
                   "data": [1, 2, 3, 4, 5, 6]}]})";
  cotensor::serving::handler::response res;
  asio::co_spawn(io, v2.handle(req),
                 [&](std::exception_ptr e, cotensor::serving::handler::response r) {
                   if (!e) {
                     res = std::move(r);
                   }
                 });
  io.run();
  if (res.result() != http::status::ok) {
    std::fprintf(stderr, "serving_consumer: %d %s\n", res.result_int(), res.body().c_str());
    return 1;
  }
  const auto doc = boost::json::parse(res.body());
  const auto& y = doc.at("outputs").at(0).at("data").as_array();
  for (std::size_t i = 0; i < 6; ++i) {
    if (y.at(i).to_number<double>() != 2.0 * double(i + 1)) {
      std::fprintf(stderr, "serving_consumer: wrong output %s\n", res.body().c_str());
      return 1;
    }
  }
  if (doc.at("id").as_string() != "c") {
    std::fprintf(stderr, "serving_consumer: id not echoed\n");
    return 1;
  }
  std::printf("serving_consumer: ok\n");
  return 0;
}
