// Where every key of the product lives. All of them carry one hash tag, so that a Lua script or
// transaction may touch any of them together on Redis Cluster, which requires every key of one
// command in one slot (the embedded renewal writes the core's order and the workers' chain in one
// script). The price is that Cluster brings failover, not sharding: see the README.

/** The hash tag: Redis Cluster hashes only the part between the first `{` and `}`. */
export const KEY_TAG = '{bc}';

/** BullMQ's prefix of every queue: `{bc}:<queue>:...`. */
export const QUEUE_KEY_PREFIX = KEY_TAG;

/** The workers' keys: chains, their indexes, webhook dedup claims. */
export const WORKER_KEY_ROOT = KEY_TAG;

/** The embedded provisioning core's keys. */
export const CORE_KEY_ROOT = `${KEY_TAG}:pp`;

/** Present once the database holds only tagged keys (key-layout.ts): later starts skip the scan. */
export const KEY_LAYOUT_KEY = `${KEY_TAG}:key-layout`;

/** A key never written: readiness deletes it, so a Cluster's tag node (a master) answers. */
export const READINESS_KEY = `${KEY_TAG}:readiness`;
