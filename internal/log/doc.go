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
//	version  uint32   1, or 2 for a segment written into a file of zeros
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
// A log whose records another log holds synced (Options.UnsyncedElsewhere,
// a shard's log under the node's WAL) may write behind
// (Options.WriteBehind): it keeps its newest records in memory, visible to
// readers, and writes many appends' worth in one write call later, always
// before a Sync or a DeletePrefix. A crash loses what it held; the other
// log brings it back.
//
// A failed fdatasync leaves the page cache in an unknown state, so it makes
// the log refuse further writes until it is reopened. A failed write, such
// as one hitting a full disk, is rolled back instead, and the log stays
// usable.
//
// A log with Options.Preallocate writes its segments into files zeroed
// and synced beforehand, which halves what each Sync costs on a
// journaling file system (see prealloc.go). Such a segment (version 2)
// ends at its last nonzero byte rather than at the end of its file, and
// every record in it ends with a nonzero byte, so recovery applies the
// rules below with that byte as the end of the file.
//
// # Open files
//
// A log keeps its segment files open, unless it shares a bound
// (Options.Files, NewFiles) with other logs: then the least recently used
// segment files no operation is using are closed whenever more than the
// bound are open, each fdatasynced first if it has unsynced bytes, and
// opened again when next read or written. The log's directory is opened
// only to fsync it.
//
// # Recovery
//
// Open verifies every segment header and record checksum, and never
// guesses: a bad record is cut as a torn write only when the log cannot
// have acknowledged it. A small state file beside the segments records the
// boot of the machine that last wrote the log and whether it was closed
// cleanly (it is written before the first change after Open and at
// Close, not on the hot path; a log whose writes another log holds too
// writes it only at Close, and takes the other log's word for the rest,
// see Options.ElsewhereNoTear). In the last segment, a bad record is
//
//   - damage if any valid record of a later index follows it, or if its
//     data up to the end of the file checks out (a flipped length);
//   - torn if it extends past the end of the file (the prefix of a write
//     that never finished, as a killed process leaves);
//   - otherwise (a checksum mismatch or an impossible length inside the
//     file) torn only if the machine may have lost power while it was
//     unsynced: the log was not closed cleanly and the machine has booted
//     since it was written. After a clean close, or a process crash in
//     the same boot, the page cache kept every write, so it is damage.
//
// A log whose unsynced records are also held by another log that replays
// them (Options.UnsyncedElsewhere: a shard's log under the node's WAL) is
// synced rarely, so a power loss can leave any part of a long unsynced
// tail; there, after a possible power loss, the last segment is cut at its
// first bad record whatever follows, and CutFrom tells the caller where,
// to check that the other log holds everything from there on.
//
// Damage is a *CorruptionError naming the file and byte offset; a bad
// record in any other segment is always damage. Two limits, written down
// rather than hidden: after a power loss, a bit flipped in the newest
// synced records with nothing written after them looks like a torn write
// and is cut (telling them apart would cost a second fsync per commit);
// and if the disk persisted a later part of an unsynced write but not an
// earlier one, recovery refuses the shard rather than cut records that
// look valid (about 1 in 1,000 simulated torn power losses).
package log
