--[[
  Finds the partner that owns an API key, in one round trip.

  KEYS[1] partner keys hash (key HMAC -> id)
  KEYS[2] partners hash (id -> JSON)

  ARGV[1] key HMAC (hex)

  Returns the partner JSON, or false when the key is unknown.
]]
local id = redis.call('HGET', KEYS[1], ARGV[1])
if not id then
  return false
end
return redis.call('HGET', KEYS[2], id)
