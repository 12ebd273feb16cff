--[[
  Stores a new order unless its caller id exists. When the order extends a chain, it is stored
  only if the chain is still at the term the caller planned from (optimistic check), so two
  concurrent renewals of one chain can never both succeed.

  KEYS[1] orders hash (caller order id -> record JSON)
  KEYS[2] chains hash (caller id of the first order -> chain JSON)
  KEYS[3] customers hash
  KEYS[4] sequences hash of the partner
  KEYS[5] instances hash

  ARGV[1] caller order id
  ARGV[2] order record JSON without "id" (the script allocates it)
  ARGV[3] chain key: the caller id of the chain's first order ("" for an order outside chains)
  ARGV[4] planned-from term count of that chain ("0" when this order starts the chain)
  ARGV[5] chain JSON to store after the write ("" for an order outside chains)
  ARGV[6] caller customer id
  ARGV[7] instance rule: "keep" (use the record's), "external" (the customer's integer
          instance, created on its first order)

  Returns {1, stored JSON} when the caller id exists (a replay: the caller compares params),
          {0, new JSON} when stored,
          {-1, ""} when the chain moved on since the caller read it (re-plan and retry),
          {-2, ""} when the customer is unknown.
]]
local existing = redis.call('HGET', KEYS[1], ARGV[1])
if existing then
  return {1, existing}
end

local customerJson = redis.call('HGET', KEYS[3], ARGV[6])
if not customerJson then
  return {-2, ''}
end

local plannedFrom = tonumber(ARGV[4])
if ARGV[3] ~= '' then
  local chainJson = redis.call('HGET', KEYS[2], ARGV[3])
  local currentCount = 0
  if chainJson then
    currentCount = cjson.decode(chainJson)['count']
  end
  if currentCount ~= plannedFrom then
    return {-1, ''}
  end
end

local record = cjson.decode(ARGV[2])
record['id'] = 'ord-' .. redis.call('HINCRBY', KEYS[4], 'order', 1)

if ARGV[7] == 'external' then
  local customer = cjson.decode(customerJson)
  if customer['instance'] == cjson.null or customer['instance'] == nil then
    local instanceId = redis.call('HINCRBY', KEYS[4], 'instance', 1)
    customer['instance'] = instanceId
    redis.call('HSET', KEYS[5], instanceId, ARGV[6])
    redis.call('HSET', KEYS[3], ARGV[6], cjson.encode(customer))
  end
  record['instance'] = customer['instance']
end

local stored = cjson.encode(record)
redis.call('HSET', KEYS[1], ARGV[1], stored)
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[3], ARGV[5])
end
return {0, stored}
