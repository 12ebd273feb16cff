--[[
  Writes a chain under its lock: the record, its intent, new history entries, and the indexes.
  Refuses when the lock is no longer ours (the lease ran out and another job may be changing the
  chain) or the stored version is not the one the caller read (a write it did not see).

  KEYS[1] lock key
  KEYS[2] chain key (`<version>|<JSON>`)
  KEYS[3] intent key
  KEYS[4] history list
  KEYS[5] order index hash (order id -> chain id)
  KEYS[6] due zset (chain id -> nextRenewalAt)
  KEYS[7] all-chains zset (chain id -> createdAt)
  KEYS[8] the customer's chains set

  ARGV[1] lock token
  ARGV[2] expected stored version ("-1": the chain must not exist yet)
  ARGV[3] the chain to store, `<ARGV[2] + 1>|<JSON>`
  ARGV[4] intent JSON ("" when the chain has none)
  ARGV[5] chain id
  ARGV[6] nextRenewalAt ("" to remove the chain from the due index)
  ARGV[7] createdAt
  ARGV[8] "1" to release the lock after writing
  ARGV[9] JSON array of order ids to map to this chain ("[]" for none)
  ARGV[10] lock lease, milliseconds: a write that keeps the lock renews its lease, so a job that
           writes before each provider call never outlives it
  ARGV[11..] history entries (JSON), appended in order

  Returns 0 when written, -1 when the lock is not ours, -2 on a version mismatch.
]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
local stored = redis.call('GET', KEYS[2])
local version = -1
if stored then
  version = tonumber(string.match(stored, '^(%d+)|'))
end
if version ~= tonumber(ARGV[2]) then
  return -2
end

redis.call('SET', KEYS[2], ARGV[3])
if ARGV[4] == '' then
  redis.call('DEL', KEYS[3])
else
  redis.call('SET', KEYS[3], ARGV[4])
end
for i = 11, #ARGV do
  redis.call('RPUSH', KEYS[4], ARGV[i])
end
if ARGV[9] ~= '[]' then
  for _, orderId in ipairs(cjson.decode(ARGV[9])) do
    redis.call('HSET', KEYS[5], orderId, ARGV[5])
  end
end
if ARGV[6] == '' then
  redis.call('ZREM', KEYS[6], ARGV[5])
else
  redis.call('ZADD', KEYS[6], ARGV[6], ARGV[5])
end
redis.call('ZADD', KEYS[7], 'NX', ARGV[7], ARGV[5])
redis.call('SADD', KEYS[8], ARGV[5])
if ARGV[8] == '1' then
  redis.call('DEL', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[10])
end
return 0
