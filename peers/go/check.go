package main

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"time"
)

// idleLimit ends a consume run when no record came for this long.
const idleLimit = 20 * time.Second

// partCheck checks one partition's records as they come: offsets 0, 1, 2... and every value
// equal to the expected bytes. Only one goroutine uses a partCheck.
type partCheck struct {
	partition int
	expected  int64 // records the partition holds
	next      int64 // the offset the next record must have
	seen      int64 // records read, right or wrong
	wrong     int64
	bytes     int64
}

// checker checks a consume run: one partCheck per partition, the total read (for the loop that
// waits for every record) and the first problem found.
type checker struct {
	parts []partCheck
	value []byte
	read  atomic.Int64 // records read, over all partitions
	last  atomic.Int64 // time.Now().UnixNano() of the last record
	first firstError
}

func newChecker(c *common) *checker {
	ck := &checker{parts: make([]partCheck, c.partitions), value: recordValue(c.valueSize)}
	n := int64(c.partitions)
	for p := range ck.parts {
		ck.parts[p] = partCheck{partition: p, expected: c.records / n}
		if int64(p) < c.records%n {
			ck.parts[p].expected++
		}
	}
	ck.last.Store(time.Now().UnixNano())
	return ck
}

// record checks one record of partition p; the caller owns that partition.
func (ck *checker) record(p int, offset int64, value []byte) {
	if p < 0 || p >= len(ck.parts) {
		ck.first.set("a record from partition %d, which the topic should not have", p)
		return
	}
	pc := &ck.parts[p]
	pc.seen++
	pc.bytes += int64(len(value))
	switch {
	case pc.seen > pc.expected:
		pc.wrong++
		ck.first.set("partition %d: record at offset %d is one more than the %d it should hold", p, offset, pc.expected)
	case offset != pc.next:
		pc.wrong++
		ck.first.set("partition %d: offset %d where %d was expected", p, offset, pc.next)
	case !bytes.Equal(value, ck.value):
		pc.wrong++
		ck.first.set("partition %d offset %d: the value differs from the expected %d bytes (got %d)", p, offset, len(ck.value), len(value))
	}
	pc.next = offset + 1
	ck.read.Add(1)
	ck.last.Store(time.Now().UnixNano())
}

// done says whether partition p has all its records.
func (ck *checker) done(p int) bool { return ck.parts[p].seen >= ck.parts[p].expected }

// idle says whether no record came for idleLimit.
func (ck *checker) idle() bool {
	return time.Since(time.Unix(0, ck.last.Load())) >= idleLimit
}

// deadline is when the run gives up unless another record comes.
func (ck *checker) deadline() time.Time { return time.Unix(0, ck.last.Load()).Add(idleLimit) }

// finish fills the counts of res; call it once every reader has stopped.
func (ck *checker) finish(res *result) {
	var missing int64
	for _, pc := range ck.parts {
		res.delivered += pc.seen - pc.wrong
		res.failed += pc.wrong
		res.bytes += pc.bytes
		if pc.seen < pc.expected {
			missing += pc.expected - pc.seen
		}
	}
	res.failed += missing
	res.err = ck.first.get()
	if missing > 0 && res.err == "" {
		res.err = fmt.Sprintf("%d records missing: none came for %s", missing, idleLimit)
	}
}
