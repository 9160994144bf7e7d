// Package tier stores closed log segments of many shards in an object
// store, and reads them back, for entries that were deleted locally.
//
// # Objects
//
// A reconciler packs ranges of log entries of many shards into one
// object with a Builder, uploads it with Store.Put and records its runs
// (the footer) in the manifest. A reader fetches one run with a ranged
// read (Store.ReadRange) and decodes it with DecodeRun; Reader adds a
// cache bounded by bytes and read-ahead on top of that.
//
// An object is, with all integers little-endian:
//
//	header   "HTIR" (4 bytes), version uint32 (1)
//	run...   back to back, each:
//	           "RUN1" (4 bytes), shard length uint16, shard name,
//	           first index uint64, last index uint64,
//	           last-first+1 entries, each:
//	             index uint64, term uint64, type uint32, data length uint32, data
//	footer   run count uint32, then for each run:
//	           shard length uint16, shard name, first uint64, last uint64,
//	           offset uint64, length uint64, CRC-32C (Castagnoli) uint32
//	trailer  footer offset uint64, footer length uint64,
//	         CRC-32C of the footer uint32, "HTIR" (4 bytes): 24 bytes
//
// A run is everything from its "RUN1" to the end of its last entry, and
// its CRC covers exactly those bytes, so a run is read and checked alone.
// Its header repeats the shard and range so that a manifest entry that
// points at the wrong bytes is caught even when the bytes are intact. The
// trailer has a fixed size so that a tool can read the footer of an
// object with two ranged reads; DecodeFooter reads it from a whole object.
//
// Damage is never silent: every check that fails returns a *CorruptError
// naming the object and the offset of the damage.
//
// # Stores
//
// OpenStore takes a gocloud.dev/blob URL; this package registers these
// schemes:
//
//	mem://                          in memory, for tests
//	file:///var/lib/herald/tier     a directory, created if missing
//	s3://BUCKET?region=REGION       Amazon S3
//	s3://BUCKET?endpoint=http://127.0.0.1:9000&region=us-east-1&use_path_style=true
//	                                an S3-compatible server (MinIO, moto, Ceph)
//
// S3 credentials come from the environment (AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, AWS_PROFILE, the shared files, an instance role),
// never from the URL. Other s3 query parameters gocloud.dev accepts:
// profile, disable_https, s3ForcePathStyle (an older name for
// use_path_style), anonymous, ssetype, kmskeyid, accelerate, dualstack,
// fips. A file:// URL may set fileblob's own parameters (dir_file_mode,
// no_tmp_dir, metadata).
//
// OpenStore writes, reads back and deletes a small object under the
// prefix "_probe/", so a wrong URL, credentials or bucket fail at once
// rather than at the first upload.
package tier
