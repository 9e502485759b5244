#include "cotensor/trace.hpp"

#include <cotensor/cotensor.hpp>

#include "support/run.hpp"

#include <boost/json/src.hpp>  // header-only Boost.JSON, to check the trace is valid JSON
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

using namespace cotensor;
namespace asio = boost::asio;

namespace {

const traced_op& find_op(const trace& t, std::string_view name) {
  auto it = std::ranges::find_if(t.ops, [&](const traced_op& op) { return op.name == name; });
  REQUIRE(it != t.ops.end());
  return *it;
}

std::int64_t nanos(const boost::json::value& micros) {
  return std::llround(micros.to_number<double>() * 1000.0);
}

// What the JSON importers of Perfetto, chrome://tracing and the DevTools Performance panel need
// beyond valid JSON (see trace::to_chrome_json): no displayTimeUnit, no tid 0, the complete
// slices of a thread nested or disjoint, and each flow event at the timestamp, on the thread
// and in the category of a slice.
void check_viewer_rules(const boost::json::object& doc) {
  CHECK_FALSE(doc.contains("displayTimeUnit"));
  struct slice {
    std::int64_t begin = 0;
    std::int64_t end = 0;
    std::string cat;
  };
  using thread_key = std::pair<std::int64_t, std::int64_t>;  // pid, tid
  std::map<thread_key, std::vector<slice>> slices;
  std::vector<const boost::json::object*> flows;
  for (const auto& e : doc.at("traceEvents").as_array()) {
    const auto& obj = e.as_object();
    const auto& ph = obj.at("ph").as_string();
    if (obj.contains("tid")) {
      CHECK(obj.at("tid").as_int64() >= 1);  // Perfetto's tid 0 is the idle thread
    }
    if (ph == "X") {
      const auto begin = nanos(obj.at("ts"));
      slices[{obj.at("pid").as_int64(), obj.at("tid").as_int64()}].push_back(
          {begin, begin + nanos(obj.at("dur")), std::string(obj.at("cat").as_string())});
    } else if (ph == "s" || ph == "f") {
      flows.push_back(&obj);
    }
  }
  for (auto& [thread, list] : slices) {
    std::ranges::sort(list, [](const slice& a, const slice& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
    });
    std::vector<std::int64_t> open;  // ends of the slices around the current one
    for (const auto& s : list) {
      while (!open.empty() && open.back() <= s.begin) {
        open.pop_back();
      }
      CAPTURE(thread.second);
      CAPTURE(s.begin);
      CHECK((open.empty() || s.end <= open.back()));  // nested, never partially overlapping
      open.push_back(s.end);
    }
  }
  for (const auto* f : flows) {
    const auto& list = slices[{f->at("pid").as_int64(), f->at("tid").as_int64()}];
    const auto ts = nanos(f->at("ts"));
    CAPTURE(ts);
    CHECK(std::ranges::any_of(
        list, [&](const slice& s) { return s.begin == ts && s.cat == f->at("cat").as_string(); }));
    if (f->at("ph").as_string() == "f") {
      CHECK(f->at("bp").as_string() == "e");  // bind to the enclosing slice, not the next one
    }
  }
}

}  // namespace

TEST_SUITE("trace") {
  TEST_CASE("a trace of z = x * y + 2 has its ops, edges and times in order" *
            doctest::timeout(20)) {
    runtime rt({.inline_small_ops = false});  // every op on a worker
    start_trace();
    auto x = ones({2, 3});
    auto y = full({2, 3}, 3.0F);
    auto z = x * y + 2.0F;
    x += 1.0F;  // must wait for `*`, which reads x
    z.wait();
    trace t = stop_trace();
    REQUIRE(t.ops.size() == 5);
    const auto& mul = find_op(t, "operator*");
    const auto& add = find_op(t, "operator+");
    const auto& inc = find_op(t, "operator+=");
    CHECK(mul.depends_on == std::vector<std::uint64_t>{0, 1});  // read after write: x, y
    CHECK(add.depends_on == std::vector<std::uint64_t>{mul.id});
    CHECK(std::ranges::find(inc.depends_on, mul.id) != inc.depends_on.end());  // write after read
    CHECK(mul.outputs == std::vector<shape>{shape{2, 3}});
    CHECK(mul.bytes == 3 * 6 * sizeof(float));
    for (const auto& op : t.ops) {
      CAPTURE(op.name);
      CHECK(op.enqueued <= op.issued);
      CHECK(op.ready >= op.enqueued);
      CHECK(op.started >= op.ready);
      CHECK(op.ended >= op.started);
      CHECK(op.backend_thread >= 0);
      CHECK(t.thread_names.at(static_cast<std::size_t>(op.backend_thread)).starts_with("worker"));
      CHECK(t.thread_names.at(static_cast<std::size_t>(op.frontend_thread)) == "frontend 0");
      for (auto dep : op.depends_on) {
        CHECK(t.ops[dep].ended <= op.started);  // nesting: a consumer starts after its producers
      }
    }
    REQUIRE(t.waits.size() == 1);
    CHECK(t.waits[0].kind == "wait");
    CHECK(t.waits[0].resumed >= t.waits[0].suspended);
    check_viewer_rules(boost::json::parse(t.to_chrome_json()).as_object());
    const std::string dot = t.to_dot();
    CHECK(dot.find("op2 -> op4 [style=dashed") != std::string::npos);
    CHECK(dot.find("t0 -> op2") != std::string::npos);
  }

  TEST_CASE("the Chrome trace is valid JSON with tracks, slices and flow arrows" *
            doctest::timeout(20)) {
    runtime rt{runtime_options{}};
    start_trace();
    auto a = randn({64, 64});
    auto b = matmul(a, a);
    auto ok = cotensor::test::run_to_completion([b]() -> asio::awaitable<bool> {
      co_await b.ready();
      co_return true;
    });
    CHECK(ok);
    trace t = stop_trace();
    auto doc = boost::json::parse(t.to_chrome_json());
    check_viewer_rules(doc.as_object());
    const auto& events = doc.at("traceEvents").as_array();
    std::set<std::string> phases;
    std::set<std::string> names;
    int flows_started = 0;
    int flows_finished = 0;
    for (const auto& e : events) {
      const auto& obj = e.as_object();
      phases.insert(std::string(obj.at("ph").as_string()));
      names.insert(std::string(obj.at("name").as_string()));
      flows_started += obj.at("ph").as_string() == "s" ? 1 : 0;
      flows_finished += obj.at("ph").as_string() == "f" ? 1 : 0;
    }
    CHECK(phases.count("X") == 1);
    CHECK(phases.count("M") == 1);
    CHECK(names.count("thread_name") == 1);
    CHECK(names.count("matmul") == 1);
    CHECK(names.count("enqueue matmul") == 1);
    CHECK(names.count("async_wait") == 1);  // the coroutine's suspension
    CHECK(phases.count("b") == 1);          // as an async slice: the thread was free meanwhile
    CHECK(flows_started == 3);              // enqueue->run for randn and matmul, randn->matmul
    CHECK(flows_finished == flows_started);
  }

  TEST_CASE("the Chrome trace keeps overlapping async waits off the thread tracks") {
    // Two coroutines on one thread: A suspends, B suspends, A resumes, B resumes. As complete
    // slices on thread 0 they would overlap partially, and Perfetto and DevTools drop one.
    trace t;
    t.thread_names = {"frontend 0", "worker 0"};
    traced_op op;
    op.name = "odd \"name\"\n\x01";
    op.enqueued = 1'000;
    op.issued = 2'000;
    op.ready = 1'500;
    op.started = 3'000;
    op.ended = 9'000;
    op.backend_thread = 1;
    t.ops.push_back(op);
    t.waits.push_back({"async_wait", 0, 0, 2'500, 8'000});
    t.waits.push_back({"async_wait", 0, 1, 4'000, 12'000});
    t.waits.push_back({"wait", 0, 0, 13'000, 14'000});  // blocks its thread: a slice on it
    auto doc = boost::json::parse(t.to_chrome_json());
    check_viewer_rules(doc.as_object());
    std::map<std::string, int> count;
    std::set<std::int64_t> ids;
    for (const auto& e : doc.at("traceEvents").as_array()) {
      const auto& obj = e.as_object();
      const std::string key =
          std::string(obj.at("ph").as_string()) + " " + std::string(obj.at("name").as_string());
      ++count[key];
      if (key == "b async_wait") {
        ids.insert(obj.at("id").as_int64());
      }
      if (key == "X odd \"name\"\n?") {
        CHECK(obj.at("tid").as_int64() == 2);  // worker 0: thread 1, tid 2
      }
    }
    CHECK(count["b async_wait"] == 2);
    CHECK(count["e async_wait"] == 2);
    CHECK(ids.size() == 2);
    CHECK(count["X wait"] == 1);
    CHECK(count["X async_wait"] == 0);
    CHECK(count["X odd \"name\"\n?"] == 1);  // control characters other than \n become '?'
  }

  TEST_CASE("a tiny op ready at its call runs on the issuing thread, a large one on a worker" *
            doctest::timeout(20)) {
    runtime rt{runtime_options{}};
    REQUIRE(rt.options().inline_small_ops);
    auto x = ones({4});
    x.wait();
    start_trace();
    auto small = x + 1.0F;               // 32 bytes, input computed: inline
    auto large = full({1 << 16}, 2.0F);  // 256 KiB: a worker
    auto chained = large + 1.0F;         // waits for `large`: a worker
    wait_all();
    trace t = stop_trace();
    REQUIRE(t.ops.size() == 3);
    CHECK(t.thread_names.at(static_cast<std::size_t>(t.ops[0].backend_thread)) == "frontend 0");
    CHECK(t.ops[0].ended <= t.ops[0].issued);  // done before its call returned
    CHECK(
        t.thread_names.at(static_cast<std::size_t>(t.ops[1].backend_thread)).starts_with("worker"));
    CHECK(
        t.thread_names.at(static_cast<std::size_t>(t.ops[2].backend_thread)).starts_with("worker"));
    check_viewer_rules(boost::json::parse(t.to_chrome_json()).as_object());  // inline op: nested
    CHECK(small.to_vector() == std::vector<float>(4, 2.0F));
    CHECK(chained.to_vector()[0] == 3.0F);
  }

  TEST_CASE("traces start and stop once, and save to a file" * doctest::timeout(20)) {
    runtime rt{runtime_options{}};
    CHECK_THROWS_AS(stop_trace(), std::logic_error);
    start_trace();
    CHECK_THROWS_AS(start_trace(), std::logic_error);
    (void)ones({4});
    trace t = stop_trace();
    CHECK(t.ops.size() == 1);
    const std::string path =
        (std::filesystem::temp_directory_path() / "cotensor_trace_test.json").string();
    t.save(path);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    CHECK(text.str() == t.to_chrome_json());
    CHECK_THROWS_AS(t.save("/nonexistent-dir/x.json"), std::system_error);
    (void)ones({4});  // not recorded: no trace is on
    start_trace();
    CHECK(stop_trace().ops.empty());
  }

  TEST_CASE("COTENSOR_TRACE records a runtime's ops from its start and saves them at its end" *
            doctest::timeout(20)) {
    const std::string path =
        (std::filesystem::temp_directory_path() / "cotensor_env_trace_test.json").string();
    std::filesystem::remove(path);
    ::setenv("COTENSOR_TRACE", path.c_str(), 1);
    {
      runtime rt{runtime_options{}};
      ::unsetenv("COTENSOR_TRACE");
      auto y = map(full({8}, 1.0F), [](float v) { return v + 1.0F; });
      CHECK(y.to_vector() == std::vector<float>(8, 2.0F));
      CHECK_THROWS_AS(start_trace(), std::logic_error);  // this runtime's trace is recording
    }
    std::ifstream in(path);
    REQUIRE(in.good());
    std::stringstream text;
    text << in.rdbuf();
    const auto events = boost::json::parse(text.str()).as_object().at("traceEvents").as_array();
    int maps = 0;
    for (const auto& e : events) {
      const auto& o = e.as_object();
      maps += o.contains("name") && o.at("name").as_string() == "map" ? 1 : 0;
    }
    CHECK(maps >= 1);
    std::filesystem::remove(path);
  }

  TEST_CASE("a trace still recording ends with its runtime" * doctest::timeout(20)) {
    {
      runtime rt{runtime_options{}};
      start_trace();
      (void)ones({4});
    }  // not stopped
    runtime next{runtime_options{}};
    CHECK_NOTHROW(start_trace());  // nothing left recording, whatever the new runtime's address
    (void)ones({4});
    trace t = stop_trace();
    CHECK(t.ops.size() == 1);  // this runtime's op only
  }
}
