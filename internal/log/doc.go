// Package log implements the segmented, append-only, crash-safe record log
// of one herald shard.
//
// The log is the Raft log of the shard, and therefore the shard's queue: the
// raftstore layer appends etcd-raft entries to it, reads them back for
// replication and application, truncates a conflicting tail, and compacts
// the prefix that a snapshot has made redundant.
//
// # On-disk layout
//
// A log is one directory of segment files. Each segment is named after the
// index of its first record as 16 lower-case hex digits followed by ".seg",
// for example 0000000000000001.seg. Segments hold consecutive runs of
// records; the last segment is the active one and is the only one written.
//
// A segment starts with a 32-byte header, little endian:
//
//	magic    [4]byte  "HLOG"
//	version  uint32   1
//	base     uint64   index of the first record in the segment
//	prevTerm uint64   term of the record just before base (0 if none)
//	reserved uint32   0
//	crc      uint32   CRC-32C of the preceding 28 bytes
//
// Records follow the header back to back, each framed as
//
//	length   uint32   number of bytes after the crc field (17 + len(data))
//	crc      uint32   CRC-32C (Castagnoli) of everything after this field
//	index    uint64
//	term     uint64
//	type     uint8
//	data     [length-17]byte
//
// # Durability
//
// Append writes a batch with one write call per segment touched; the
// records are immediately visible to readers but become durable only after
// Sync, which fdatasyncs every segment with unsynced bytes. Concurrent Sync
// calls are group-committed. TruncateSuffix, Reset, segment creation and
// the overwrite performed by Append are made durable before they return,
// because a half-applied truncation could otherwise resurrect a stale tail
// behind newer records after a crash. A full segment is synced before the
// next one is created, so only the last segment can ever end in a torn
// record.
//
// A failed fdatasync leaves the page cache in an unknown state, so it makes
// the log refuse further writes until it is reopened. A failed write, such
// as one hitting a full disk, is rolled back instead, and the log stays
// usable.
//
// # Recovery
//
// Open verifies every segment header and record checksum. A torn final
// record in the last segment, the residue of a write that was never synced
// and so never acknowledged, is cut away: a record that extends past the
// end of the file, or a damaged record followed by nothing but zero bytes
// (unwritten space; this includes a damaged record ending exactly at the
// end of the file). Any other damage is reported as a *CorruptionError
// naming the file and byte offset; the log never drops data silently.
package log
