--[[
  Moves an order, or every order of a chain, to a status. A repeat of the same change succeeds;
  any change to a cancelled order is refused. All orders are checked before any is written.

  KEYS[1] orders hash
  KEYS[2] chains hash

  ARGV[1] caller order id
  ARGV[2] target status: "active" | "suspended" | "cancelled"
  ARGV[3] scope: "order" (that order) or "chain" (ARGV[1] must be a chain's first order, and
          every order of the chain changes)

  Returns 0 when changed (or already so),
          -1 when the order is unknown,
          -2 when an order to change is cancelled (and the target is not "cancelled"),
          -3 when the scope is "chain" and ARGV[1] is not the first order of a chain.
]]
local target = ARGV[2]
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end

local ids = {ARGV[1]}
if ARGV[3] == 'chain' then
  local chainJson = redis.call('HGET', KEYS[2], ARGV[1])
  if not chainJson then
    return -3
  end
  ids = cjson.decode(chainJson)['orders']
end

local records = {}
for i, id in ipairs(ids) do
  local record = cjson.decode(redis.call('HGET', KEYS[1], id))
  if record['status'] == 'cancelled' and target ~= 'cancelled' then
    return -2
  end
  records[i] = record
end

for i, id in ipairs(ids) do
  if records[i]['status'] ~= target then
    records[i]['status'] = target
    redis.call('HSET', KEYS[1], id, cjson.encode(records[i]))
  end
end
return 0
