-- wrk script: POST /v1/infer with one row of WIDTH floats (env COTENSOR_BENCH_WIDTH, default 512).
local width = tonumber(os.getenv("COTENSOR_BENCH_WIDTH") or "512")
local row = {}
for i = 1, width do
  row[i] = string.format("%.4f", math.sin(i * 0.37))
end
wrk.method = "POST"
wrk.path = "/v1/infer"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"inputs": [[' .. table.concat(row, ",") .. ']]}'

-- One machine-readable line at the end: requests/s, p50 and p99 latency in ms, errors.
done = function(summary, latency, requests)
  local errors = summary.errors.status + summary.errors.connect + summary.errors.read +
                 summary.errors.write + summary.errors.timeout
  io.write(string.format("cotensor.server: rps=%.1f p50_ms=%.2f p99_ms=%.2f requests=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, summary.requests, errors))
end
