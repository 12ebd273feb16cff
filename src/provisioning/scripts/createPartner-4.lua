--[[
  Registers a partner under a unique name with the HMAC of its API key.

  KEYS[1] partners hash (id -> JSON)
  KEYS[2] partner names hash (name -> id)
  KEYS[3] partner keys hash (key HMAC -> id)
  KEYS[4] registry sequences hash

  ARGV[1] name
  ARGV[2] partner JSON without "id"
  ARGV[3] key HMAC (hex)

  Returns {0, stored JSON} when created, {-1, ""} when the name is taken.
]]
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  return {-1, ''}
end
local partner = cjson.decode(ARGV[2])
local id = redis.call('HINCRBY', KEYS[4], 'partner', 1)
partner['id'] = id
local stored = cjson.encode(partner)
redis.call('HSET', KEYS[1], id, stored)
redis.call('HSET', KEYS[2], ARGV[1], id)
redis.call('HSET', KEYS[3], ARGV[3], id)
return {0, stored}
