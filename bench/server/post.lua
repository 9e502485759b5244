-- wrk script: an Open Inference Protocol (KServe v2) JSON request of one row, INPUT0 FP32
-- [1, 512], to /v2/models/bench/infer (the model bench/server/run.sh exports).
local width = 512
local row = {}
for i = 1, width do
  row[i] = string.format("%.4f", math.sin(i * 0.37))
end
wrk.method = "POST"
wrk.path = "/v2/models/bench/infer"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"inputs": [{"name": "INPUT0", "shape": [1, ' .. width .. '], "datatype": "FP32", ' ..
           '"data": [' .. table.concat(row, ",") .. ']}]}'

-- Any non-2xx answer counts in summary.errors.status.
-- One machine-readable line at the end: requests/s, p50 and p99 latency in ms, errors.
done = function(summary, latency, requests)
  local errors = summary.errors.status + summary.errors.connect + summary.errors.read +
                 summary.errors.write + summary.errors.timeout
  io.write(string.format("cotensor.server: rps=%.1f p50_ms=%.2f p99_ms=%.2f requests=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, summary.requests, errors))
end
