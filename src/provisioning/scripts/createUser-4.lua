--[[
  Creates a user unless one with the same (lower-cased) email exists: the unique constraint
  "users_email" of the spec.

  KEYS[1] users hash (email -> fixed fields JSON)
  KEYS[2] users active hash (email -> "1" | "0")
  KEYS[3] users password hash (email -> scrypt hash)
  KEYS[4] sequences hash of the partner

  ARGV[1] lower-cased email
  ARGV[2] user record JSON without "id" and folder ids
  ARGV[3] password hash

  Returns {0, stored JSON} when created, {-1, ""} when the email exists.
]]
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return {-1, ''}
end
local record = cjson.decode(ARGV[2])
record['id'] = redis.call('HINCRBY', KEYS[4], 'user', 1)
-- The eight folder fields are ids of folders created with the user (DESIGN §3).
local last = redis.call('HINCRBY', KEYS[4], 'folder', 8)
local folders = {'rootFiles', 'trashFiles', 'inbox', 'spam', 'sent', 'trashEmail', 'drafts', 'mainCalendar'}
for i, name in ipairs(folders) do
  record[name] = last - 8 + i
end
local stored = cjson.encode(record)
redis.call('HSET', KEYS[1], ARGV[1], stored)
redis.call('HSET', KEYS[2], ARGV[1], '1')
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
return {0, stored}
