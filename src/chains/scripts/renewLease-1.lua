--[[
  Renews the lease of a lock (a chain's, or the reconcile round's) if it is still ours; never takes
  a lock that is not (a lock released meanwhile stays released, one that lapsed and was taken stays
  its new holder's).

  KEYS[1] lock key
  ARGV[1] lock token
  ARGV[2] lease, milliseconds

  Returns 1 when renewed, 0 when it was not ours.
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
