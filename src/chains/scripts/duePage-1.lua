--[[
  A page of the due index: the chains whose renewal falls due at or before a time, earliest
  first, from where the page before ended. The index keeps chains due at the same second in
  byte order of their ids, so a page ends at one entry and the next starts right after it, even
  when thousands fall due at once. One atomic read, so no entry is skipped or repeated between
  locating the cursor and reading the page.

  KEYS[1] due zset (chain id scored by when its renewal is due, epoch seconds)

  ARGV[1] until: the latest due time listed (inclusive)
  ARGV[2] limit: the most entries returned
  ARGV[3] the cursor's due time ('' for the first page)
  ARGV[4] the cursor's chain id ('' for the first page)

  Returns {id, score, id, score, ...}, earliest first.
]]
local due, untilScore, limit = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])

-- a < b as Redis orders members of equal score (memcmp). Lua's own `<` follows the server's
-- collation locale, which may not be byte order.
local function bytesBefore(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local start = 0
if ARGV[4] ~= '' then
  local score = redis.call('ZSCORE', due, ARGV[4])
  if score and tonumber(score) == tonumber(ARGV[3]) then
    start = redis.call('ZRANK', due, ARGV[4]) + 1
  else
    -- The cursor's chain has moved or left since (renewed, cancelled): start where it stood,
    -- after every chain due earlier and those due at its second ordered up to it.
    start = redis.call('ZCOUNT', due, '-inf', '(' .. ARGV[3])
    local ties = redis.call('ZRANGEBYSCORE', due, ARGV[3], ARGV[3])
    local low, high = 1, #ties + 1 -- the first tie after the cursor's id: a binary search
    while low < high do
      local middle = math.floor((low + high) / 2)
      if bytesBefore(ARGV[4], ties[middle]) then high = middle else low = middle + 1 end
    end
    start = start + low - 1
  end
end

local reply = {}
local page = redis.call('ZRANGE', due, start, start + limit - 1, 'WITHSCORES')
for i = 1, #page, 2 do
  if tonumber(page[i + 1]) > untilScore then break end
  reply[#reply + 1] = page[i]
  reply[#reply + 1] = page[i + 1]
end
return reply
