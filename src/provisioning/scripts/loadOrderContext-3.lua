--[[
  Reads everything an order operation decides from, in one round trip and one command.

  KEYS[1] orders hash
  KEYS[2] customers hash
  KEYS[3] chains hash

  ARGV[1] caller order id (the order being created: a replay if it exists)
  ARGV[2] caller customer id ("" for none)
  ARGV[3] caller id of the chain's first order ("" for none)

  Returns {order JSON, customer JSON, chain JSON, first order JSON}, each "" when absent.
]]
local function read(key, field)
  if field == '' then
    return ''
  end
  return redis.call('HGET', key, field) or ''
end

return {
  read(KEYS[1], ARGV[1]),
  read(KEYS[2], ARGV[2]),
  read(KEYS[3], ARGV[3]),
  read(KEYS[1], ARGV[3]),
}
