--[[
  The renewal fast path: takes a chain's lock and, when the chain is still exactly as it was when
  its renewal job was scheduled, writes the renewal intent prepared back then, in one round trip.
  Otherwise it only takes the lock, like lockChain, and the job decides from what it read.

  The intent was decided from the chain at `version`, for any `now` in [validFrom, validUntil):
  an unchanged version means an unchanged chain, so the decision still holds.

  KEYS[1] lock key
  KEYS[2] chain key (`<version>|<JSON>`)
  KEYS[3] intent key

  ARGV[1] lock token (unique per attempt)
  ARGV[2] lease, milliseconds
  ARGV[3] the chain version the intent was prepared from
  ARGV[4] now (epoch seconds, the workers' Clock)
  ARGV[5] validFrom
  ARGV[6] validUntil
  ARGV[7] intent JSON

  Returns {2, stored chain} when the intent was written,
          {1, stored chain or "", intent JSON or ""} when only the lock was taken,
          {0} when another holder has the lock.
]]
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return {0}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local stored = redis.call('GET', KEYS[2])
local intent = redis.call('GET', KEYS[3])
if not stored or intent then
  return {1, stored or '', intent or ''}
end
local now = tonumber(ARGV[4])
if tonumber(string.match(stored, '^(%d+)|')) ~= tonumber(ARGV[3])
    or now < tonumber(ARGV[5]) or now >= tonumber(ARGV[6]) then
  return {1, stored, ''}
end
redis.call('SET', KEYS[3], ARGV[7])
return {2, stored}
