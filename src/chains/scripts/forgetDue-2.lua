--[[
  Takes a chain out of the due index if its record is still at the version read: one written
  before the index left out chains that renew only after a payment or a person (expired,
  flagged), which the caller read as such. A save since wrote the index itself.

  KEYS[1] chain key (`<version>|<JSON>`)
  KEYS[2] due zset

  ARGV[1] the version read
  ARGV[2] chain id

  Returns 1 when taken out, 0 otherwise.
]]
local stored = redis.call('GET', KEYS[1])
if stored and string.match(stored, '^(%d+)|') == ARGV[1] then
  return redis.call('ZREM', KEYS[2], ARGV[2])
end
return 0
