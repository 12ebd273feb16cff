--[[
  Storing a new order, shared by createOrder and createOrderAndSaveChain. The order is stored
  unless its caller id exists. When it extends a chain, it is stored only if the chain is still at
  the term the caller planned from (optimistic check), so two concurrent renewals of one chain can
  never both succeed.

  keys[1] orders hash (caller order id -> record JSON)
  keys[2] chains hash (caller id of the first order -> chain JSON)
  keys[3] customers hash
  keys[4] sequences hash of the partner
  keys[5] instances hash

  args[1] caller order id
  args[2] order record JSON without "id" (the script allocates it)
  args[3] chain key: the caller id of the chain's first order ("" for an order outside chains)
  args[4] planned-from term count of that chain ("0" when this order starts the chain)
  args[5] chain JSON to store after the write ("" for an order outside chains)
  args[6] caller customer id
  args[7] instance rule: "keep" (use the record's), "external" (the customer's integer
          instance, created on its first order)
]]

--- The reply when the order must not be written now, or nil and the customer's JSON when it may:
--- {1, stored JSON} when the caller id exists (a replay: the caller compares params),
--- {-1, ""} when the chain moved on since the caller read it (re-plan and retry),
--- {-2, ""} when the customer is unknown,
--- {-4, ""} when the chain's first order was cancelled since the caller read it (a cancel that
--- raced this renewal must not leave a new paid term on a cancelled chain).
local function orderInsertRefusal(keys, args)
  local existing = redis.call('HGET', keys[1], args[1])
  if existing then
    return {1, existing}
  end
  local customerJson = redis.call('HGET', keys[3], args[6])
  if not customerJson then
    return {-2, ''}
  end
  if args[3] ~= '' then
    local chainJson = redis.call('HGET', keys[2], args[3])
    local currentCount = 0
    if chainJson then
      currentCount = cjson.decode(chainJson)['count']
    end
    if currentCount ~= tonumber(args[4]) then
      return {-1, ''}
    end
    if args[4] ~= '0' then
      -- Statuses are a closed set of words, so a plain find of the field is exact.
      local parentJson = redis.call('HGET', keys[1], args[3])
      if parentJson and string.find(parentJson, '"status":"cancelled"', 1, true) then
        return {-4, ''}
      end
    end
  end
  return nil, customerJson
end

--- Stores the order (and its chain); returns the stored order JSON and the order's id.
local function writeNewOrder(keys, args, customerJson)
  local id = 'ord-' .. redis.call('HINCRBY', keys[4], 'order', 1)
  local stored
  if args[7] == 'external' then
    local record = cjson.decode(args[2])
    record['id'] = id
    local customer = cjson.decode(customerJson)
    if customer['instance'] == cjson.null or customer['instance'] == nil then
      local instanceId = redis.call('HINCRBY', keys[4], 'instance', 1)
      customer['instance'] = instanceId
      redis.call('HSET', keys[5], instanceId, args[6])
      redis.call('HSET', keys[3], args[6], cjson.encode(customer))
    end
    record['instance'] = customer['instance']
    stored = cjson.encode(record)
  else
    -- The id goes in front of the record's own fields: no decoding and encoding of the JSON
    -- (args[2] is a non-empty object without "id").
    stored = '{"id":"' .. id .. '",' .. string.sub(args[2], 2)
  end

  redis.call('HSET', keys[1], args[1], stored)
  if args[3] ~= '' then
    redis.call('HSET', keys[2], args[3], args[5])
  end
  return stored, id
end
