// storage/constants.ts — sizes of the disk tier that the TypeScript side needs (they match
// native/storage: row_cache.h kSlotMetaBytes).

/** Bytes of cache bookkeeping per slot, counted against a disk-backed table's cacheBytes. */
export const SLOT_META_BYTES = 32;
