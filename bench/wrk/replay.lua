-- POST /orders cycling over the keys wrk-replay-1..N that bench/http-wrk.sh created first:
-- with the layer every request is a replay of a stored 201.
local sequence = 0
local keys = 64
function init(args)
  keys = tonumber(args[1]) or keys
end

function request()
  sequence = sequence % keys + 1
  return wrk.format("POST", "/orders", {
    ["Content-Type"] = "application/json",
    ["Authorization"] = "Bearer bench",
    ["Idempotency-Key"] = "wrk-replay-" .. sequence,
  }, '{"user_id": 7, "amount_cents": 1299}')
end
