--[[
  Writing a chain under its lock, shared by saveChain and by the embedded core's
  createOrderAndSaveChain (which commits an order and the workers' record of it together).
  It refuses when the lock is no longer ours (the lease ran out and another job may be changing
  the chain) or the stored version is not the one the caller read (a write it did not see).

  A save without a lock token is one whose caller read, decided and now writes in this one
  script's step (a prepared renewal committed with its order): it refuses while any job holds
  the lock or an intent is pending, since either means a change in progress that the stored
  version does not show yet. It relies on "same version, same record": every write of the
  record goes through here and bumps the version by one from the version its writer read, so
  each version is written once (an intent has a key of its own and moves no version).

  keys[1] lock key
  keys[2] chain key (`<version>|<JSON>`)
  keys[3] intent key
  keys[4] history list
  keys[5] order index hash (order id -> chain id)
  keys[6] due zset (chain id -> nextRenewalAt)
  keys[7] all-chains zset (chain id -> createdAt)
  keys[8] the customer's chains set

  args[1] lock token ("" for a save that takes no lock)
  args[2] expected stored version ("-1": the chain must not exist yet)
  args[3] the chain to store, `<args[2] + 1>|<JSON>`
  args[4] intent JSON ("" when the chain has none)
  args[5] chain id
  args[6] nextRenewalAt ("" to remove the chain from the due index)
  args[7] createdAt
  args[8] "1" to release the lock after writing
  args[9] JSON array of order ids to map to this chain ("[]" for none)
  args[10] lock lease, milliseconds: a write that keeps the lock renews its lease, so a job that
           writes before each provider call never outlives it
  args[11..] history entries (JSON), appended in order
]]

--- -1 when the lock is not ours (or, without a token, held at all), -2 on a version mismatch (or,
--- without a token, a pending intent), nil when the save may go ahead.
local function chainSaveRefusal(keys, args)
  if args[1] == '' then
    if redis.call('EXISTS', keys[1]) == 1 then
      return -1
    end
    if redis.call('EXISTS', keys[3]) == 1 then
      return -2
    end
  elseif redis.call('GET', keys[1]) ~= args[1] then
    return -1
  end
  local stored = redis.call('GET', keys[2])
  local version = -1
  if stored then
    version = tonumber(string.match(stored, '^(%d+)|'))
  end
  if version ~= tonumber(args[2]) then
    return -2
  end
  return nil
end

local function writeChainSave(keys, args)
  redis.call('SET', keys[2], args[3])
  if args[4] == '' then
    redis.call('DEL', keys[3])
  else
    redis.call('SET', keys[3], args[4])
  end
  for i = 11, #args do
    redis.call('RPUSH', keys[4], args[i])
  end
  if args[9] ~= '[]' then
    for _, orderId in ipairs(cjson.decode(args[9])) do
      redis.call('HSET', keys[5], orderId, args[5])
    end
  end
  if args[6] == '' then
    redis.call('ZREM', keys[6], args[5])
  else
    redis.call('ZADD', keys[6], args[6], args[5])
  end
  redis.call('ZADD', keys[7], 'NX', args[7], args[5])
  redis.call('SADD', keys[8], args[5])
  if args[1] == '' then
    -- A save without a token holds no lock to release or extend.
    return
  end
  if args[8] == '1' then
    redis.call('DEL', keys[1])
  else
    redis.call('PEXPIRE', keys[1], args[10])
  end
end
