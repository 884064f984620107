-- The gateway's duplicate POST /payments/callback for one order already PAID (bench/http-wrk.sh
-- passes the order id): replayed by the layer, or answered by the bare state machine.
function init(args)
  local order = tonumber(args[1])
  wrk.method = "POST"
  wrk.path = "/payments/callback"
  wrk.headers["Content-Type"] = "application/json"
  wrk.body = string.format('{"trade_no": "T-%d", "order_id": %d}', order, order)
end
