--[[
  Takes a chain's lock (with a lease) and reads the chain and its intent in the same round trip.

  KEYS[1] lock key
  KEYS[2] chain key
  KEYS[3] intent key

  ARGV[1] lock token (unique per attempt)
  ARGV[2] lease, milliseconds

  Returns {1, stored chain or "", intent JSON or ""} when the lock was taken (or is already
  ours), {0} when another holder has it.
]]
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return {0}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, redis.call('GET', KEYS[2]) or '', redis.call('GET', KEYS[3]) or ''}
