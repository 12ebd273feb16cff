--[[
  Releases a lock (a chain's, or the reconcile round's) if it is still ours (a lease that ran out
  may now be someone else's).

  KEYS[1] lock key
  ARGV[1] lock token

  Returns 1 when released, 0 when it was not ours.
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
