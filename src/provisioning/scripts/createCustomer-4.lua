--[[
  Creates a customer unless its caller id exists, atomically with its instance (marketplace) and
  its onboarding email (marketplace).

  KEYS[1] customers hash (caller customer id -> record JSON)
  KEYS[2] sequences hash of the partner
  KEYS[3] instances hash (instance id -> caller customer id)
  KEYS[4] outbox stream

  ARGV[1] caller customer id
  ARGV[2] customer record JSON, with "id" and "instance" set to the placeholders below
  ARGV[3] id kind: "string" (marketplace, "cus-<n>") or "integer" (external)
  ARGV[4] "1" to create a marketplace instance with the customer, "0" otherwise
  ARGV[5] onboarding base url ("" for no email); the instance id is appended
  ARGV[6] partner id (for the outbox entry)
  ARGV[7] now, epoch seconds
  ARGV[8] instance id for a marketplace customer: random, because it is public (the onboarding
          url) and must be unique across partners

  Returns {1, stored JSON} when the caller id already exists (the caller compares params),
          {0, new JSON} when created.
]]
local existing = redis.call('HGET', KEYS[1], ARGV[1])
if existing then
  return {1, existing}
end

local record = cjson.decode(ARGV[2])
local n = redis.call('HINCRBY', KEYS[2], 'customer', 1)
if ARGV[3] == 'integer' then
  record['id'] = n
else
  record['id'] = 'cus-' .. n
end

if ARGV[4] == '1' then
  local instanceId = ARGV[8]
  record['instance'] = instanceId
  redis.call('HSET', KEYS[3], instanceId, ARGV[1])
  if ARGV[5] ~= '' then
    local url = ARGV[5] .. instanceId
    record['url'] = url
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', 100000, '*',
      'type', 'onboarding', 'partner', ARGV[6], 'customer', ARGV[1],
      'to', record['admin']['email'], 'url', url, 'at', ARGV[7])
  end
end

local stored = cjson.encode(record)
redis.call('HSET', KEYS[1], ARGV[1], stored)
return {0, stored}
