--[[
  Writes a chain under its lock: the record, new history entries, and the indexes. Refuses when
  the lock is no longer ours (the lease ran out and another job may be changing the chain) or the
  stored version is not the one the caller read (a write it did not see).

  KEYS[1] lock key
  KEYS[2] chain key
  KEYS[3] history list
  KEYS[4] order index hash (order id -> chain id)
  KEYS[5] due zset (chain id -> nextRenewalAt)
  KEYS[6] all-chains zset (chain id -> createdAt)
  KEYS[7] the customer's chains set

  ARGV[1] lock token
  ARGV[2] expected stored version ("-1": the chain must not exist yet)
  ARGV[3] chain JSON (its version is ARGV[2] + 1)
  ARGV[4] chain id
  ARGV[5] nextRenewalAt ("" to remove the chain from the due index)
  ARGV[6] createdAt
  ARGV[7] "1" to release the lock after writing
  ARGV[8] JSON array of order ids to map to this chain ("[]" for none)
  ARGV[9] lock lease, milliseconds: a write that keeps the lock renews its lease, so a job that
          writes before each provider call never outlives it
  ARGV[10..] history entries (JSON), appended in order

  Returns 0 when written, -1 when the lock is not ours, -2 on a version mismatch.
]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
local stored = redis.call('GET', KEYS[2])
local version = -1
if stored then
  version = cjson.decode(stored)['version']
end
if version ~= tonumber(ARGV[2]) then
  return -2
end

redis.call('SET', KEYS[2], ARGV[3])
for i = 10, #ARGV do
  redis.call('RPUSH', KEYS[3], ARGV[i])
end
for _, orderId in ipairs(cjson.decode(ARGV[8])) do
  redis.call('HSET', KEYS[4], orderId, ARGV[4])
end
if ARGV[5] == '' then
  redis.call('ZREM', KEYS[5], ARGV[4])
else
  redis.call('ZADD', KEYS[5], ARGV[5], ARGV[4])
end
redis.call('ZADD', KEYS[6], 'NX', ARGV[6], ARGV[4])
redis.call('SADD', KEYS[7], ARGV[4])
if ARGV[7] == '1' then
  redis.call('DEL', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[9])
end
return 0
