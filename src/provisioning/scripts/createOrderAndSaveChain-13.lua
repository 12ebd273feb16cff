--[[
  Embedded mode: stores a new order and, in the same atomic step, the workers' record of it (a
  chain save under its lock), or neither. The order and its record then cannot be told apart by
  a crash: no intent has to be finished, and no other job ever sees one without the other.

  KEYS[1..5]  the order's keys (includes/create-order.lua)
  KEYS[6..13] the chain save's keys (../../chains/scripts/includes/save-chain.lua)
  ARGV[1..7]  the order's args
  ARGV[8..]   the chain save's args (ending with its history entries)

  Returns {0, new order's id} when both were written; otherwise what createOrder returns when it
          writes nothing, or {-3, code} when the chain save is refused (code -1: the lock is not
          ours; -2: the chain changed), with nothing written either.
]]
--- @include "includes/create-order.lua"
--- @include "../../chains/scripts/includes/save-chain.lua"

local orderKeys, orderArgs, chainKeys, chainArgs = {}, {}, {}, {}
for i = 1, 5 do
  orderKeys[i] = KEYS[i]
end
for i = 6, 13 do
  chainKeys[i - 5] = KEYS[i]
end
for i = 1, 7 do
  orderArgs[i] = ARGV[i]
end
for i = 8, #ARGV do
  chainArgs[i - 7] = ARGV[i]
end

local refusal, customerJson = orderInsertRefusal(orderKeys, orderArgs)
if refusal then
  return refusal
end
local chainRefusal = chainSaveRefusal(chainKeys, chainArgs)
if chainRefusal then
  return {-3, tostring(chainRefusal)}
end
local _, id = writeNewOrder(orderKeys, orderArgs, customerJson)
writeChainSave(chainKeys, chainArgs)
return {0, id}
