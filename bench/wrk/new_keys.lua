-- POST /orders with a new Idempotency-Key on every request (bench/http-wrk.sh).
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("id", threads)
end

local sequence = 0
function request()
  sequence = sequence + 1
  return wrk.format("POST", "/orders", {
    ["Content-Type"] = "application/json",
    ["Authorization"] = "Bearer bench",
    ["Idempotency-Key"] = string.format("wrk-%d-%d-%d", run, id, sequence),
  }, '{"user_id": 7, "amount_cents": 1299}')
end

function init(args)
  run = tonumber(args[1]) or 0
end
