package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// groupOpts are the `group` subcommand's flags: the consumer's and the group's.
type groupOpts struct {
	consumeOpts
	groupID             string
	members             int
	assignor            string
	sessionTimeoutMs    int
	heartbeatIntervalMs int
	leaveAt             float64
}

func parseGroup(args []string) (groupOpts, error) {
	var o groupOpts
	fs := newFlags("group", &o.common)
	consumeFlags(fs, &o.consumeOpts)
	fs.StringVar(&o.groupID, "group-id", "", "the group id (fresh per run)")
	fs.IntVar(&o.members, "members", 3, "members in the group")
	fs.StringVar(&o.assignor, "assignor", "range", "range|roundrobin|cooperative-sticky")
	fs.IntVar(&o.sessionTimeoutMs, "session-timeout-ms", 6000, "session timeout")
	fs.IntVar(&o.heartbeatIntervalMs, "heartbeat-interval-ms", 500, "heartbeat interval")
	fs.Float64Var(&o.leaveAt, "leave-at", 0.5, "the share of the records read when the last member leaves")
	if err := parse(fs, &o.common, args); err != nil {
		return o, err
	}
	if o.groupID == "" {
		return o, fmt.Errorf("--group-id is required")
	}
	if o.members < 1 {
		return o, fmt.Errorf("--members must be at least 1")
	}
	switch o.assignor {
	case "range", "roundrobin", "cooperative-sticky":
	default:
		return o, fmt.Errorf("--assignor %q: want range, roundrobin or cooperative-sticky", o.assignor)
	}
	if o.sessionTimeoutMs <= 0 || o.heartbeatIntervalMs <= 0 {
		return o, fmt.Errorf("--session-timeout-ms and --heartbeat-interval-ms must be positive")
	}
	return o, nil
}

// leaveAfter is the record count after which the last member leaves (the harness's
// GroupSettings::leave_after: records × leave-at, the share clamped to 0..1, truncated).
func (o *groupOpts) leaveAfter() int64 {
	x := min(max(o.leaveAt, 0), 1)
	return int64(float64(o.records) * x)
}

func group(o groupOpts) (groupResult, error) {
	if o.client == "kafka-go" && o.assignor == "cooperative-sticky" {
		return groupResult{}, fmt.Errorf("kafka-go has no cooperative rebalance protocol (its ConsumerGroup is eager only): %w", errUnsupported)
	}
	if err := waitTopic(&o.common); err != nil {
		return groupResult{}, err
	}
	switch o.client {
	case "franz-go":
		return franzGroup(o)
	case "kafka-go":
		return kafkaGoGroup(o)
	}
	return groupResult{}, fmt.Errorf("unknown --client %q (franz-go or kafka-go)", o.client)
}

// timeline holds when the run's events happened, from the members' creation (0: not yet).
type timeline struct {
	assigned, leave, owned, resumed, done time.Duration
	set                                   [5]bool
}

const (
	evAssigned = iota
	evLeave
	evOwned
	evResumed
	evDone
)

func (t *timeline) mark(ev int, d time.Duration) {
	if t.set[ev] {
		return
	}
	t.set[ev] = true
	switch ev {
	case evAssigned:
		t.assigned = d
	case evLeave:
		t.leave = d
	case evOwned:
		t.owned = d
	case evResumed:
		t.resumed = d
	case evDone:
		t.done = d
	}
}

// progress is what the members of one run share: their assignments, the per-record tally and
// the timeline. It is the harness's Progress (bench/src/consumer/group.rs) in Go.
type progress struct {
	t0         time.Time
	partitions int
	records    int64
	value      []byte
	leaveAfter int64

	mu sync.Mutex // guards owned, active, resumed, tl
	// Per member: the partitions it owns (from its callbacks).
	owned []map[int32]struct{}
	// Per member: whether it is still in the group.
	active []bool
	// Per member, once the remaining members own everything: it handed out a record since.
	resumed        []bool
	awaitingResume atomic.Bool
	tl             timeline

	// Per record number (offset × partitions + partition): how often it was handed out.
	seen      []atomic.Uint32
	distinct  atomic.Int64
	delivered atomic.Int64
	bad       atomic.Int64
	first     firstError

	// stop is closed when the members should stop (every record read, or a stall).
	stop     chan struct{}
	stopOnce sync.Once
}

func newProgress(o *groupOpts) *progress {
	p := &progress{
		partitions: o.partitions,
		records:    o.records,
		value:      recordValue(o.valueSize),
		leaveAfter: o.leaveAfter(),
		owned:      make([]map[int32]struct{}, o.members),
		active:     make([]bool, o.members),
		resumed:    make([]bool, o.members),
		seen:       make([]atomic.Uint32, o.records),
		stop:       make(chan struct{}),
	}
	for m := range p.owned {
		p.owned[m] = map[int32]struct{}{}
		p.active[m] = true
	}
	p.t0 = time.Now()
	return p
}

func (p *progress) stopped() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

func (p *progress) stopAll() { p.stopOnce.Do(func() { close(p.stop) }) }

// wait blocks until every record was handed out or nothing new came for idleLimit (checking
// every 10 ms), then tells the members to stop. It returns why the run stalled, or "".
func (p *progress) wait() string {
	last, at := p.distinct.Load(), time.Now()
	var why string
	for p.distinct.Load() < p.records {
		if d := p.distinct.Load(); d != last {
			last, at = d, time.Now()
		} else if time.Since(at) > idleLimit {
			why = fmt.Sprintf("no new record for %s after %d of %d", idleLimit, d, p.records)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.stopAll()
	return why
}

// shouldLeave says whether member m should leave now: it is the last member and the share of
// the records is read.
func (p *progress) shouldLeave(m int) bool {
	return m+1 == len(p.active) && p.distinct.Load() >= p.leaveAfter
}

// assigned: member m's callback added these partitions.
func (p *progress) assigned(m int, parts []int32) {
	debugf("%v member %d assigned %d", time.Since(p.t0), m, len(parts))
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, q := range parts {
		p.owned[m][q] = struct{}{}
	}
	p.checkOwnershipLocked()
}

// revoked: member m's callback took these partitions away (revoked or lost).
func (p *progress) revoked(m int, parts []int32) {
	debugf("%v member %d revoked %d (distinct %d)", time.Since(p.t0), m, len(parts), p.distinct.Load())
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, q := range parts {
		delete(p.owned[m], q)
	}
}

// leaving: member m starts to leave (before its close); it no longer counts as a member.
func (p *progress) leaving(m int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.active[m] = false
	p.tl.mark(evLeave, time.Since(p.t0))
}

// checkOwnershipLocked marks `assigned` or `owned` when the active members own every
// partition, each once, and each owns some. p.mu is held.
func (p *progress) checkOwnershipLocked() {
	total := 0
	union := map[int32]struct{}{}
	for m, own := range p.owned {
		if !p.active[m] {
			continue
		}
		if len(own) == 0 {
			return
		}
		total += len(own)
		for q := range own {
			union[q] = struct{}{}
		}
	}
	if total != len(union) || len(union) != p.partitions {
		return
	}
	now := time.Since(p.t0)
	if !p.tl.set[evAssigned] {
		p.tl.mark(evAssigned, now)
	} else if p.tl.set[evLeave] && !p.tl.set[evOwned] {
		p.tl.mark(evOwned, now)
		p.awaitingResume.Store(true)
	}
}

// record: one record handed out to member m; its value is checked and it is counted.
func (p *progress) record(m int, partition int32, offset int64, value []byte) {
	p.delivered.Add(1)
	if partition < 0 || int(partition) >= p.partitions || offset < 0 {
		p.fail("partition %d offset %d: no such record", partition, offset)
		return
	}
	i := offset*int64(p.partitions) + int64(partition)
	if i >= p.records {
		p.fail("partition %d offset %d: no such record", partition, offset)
		return
	}
	if !bytes.Equal(value, p.value) {
		p.fail("partition %d offset %d: another value", partition, offset)
	}
	if p.seen[i].Add(1) == 1 {
		if p.distinct.Add(1) == p.records {
			p.mu.Lock()
			p.tl.mark(evDone, time.Since(p.t0))
			p.mu.Unlock()
		}
	}
	if p.awaitingResume.Load() {
		p.noteResume(m)
	}
}

func (p *progress) noteResume(m int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resumed[m] = true
	for i, r := range p.resumed {
		if !r && p.active[i] {
			return
		}
	}
	p.awaitingResume.Store(false)
	p.tl.mark(evResumed, time.Since(p.t0))
}

func (p *progress) fail(format string, args ...any) {
	p.bad.Add(1)
	p.first.set(format, args...)
}

// groupResult is what one group run measured, printed as the GROUP line.
type groupResult struct {
	tl                            timeline
	delivered, duplicates, failed int64
	cpu                           cpuSpan
	version                       string
	err                           string
}

// result is the run's result; why is the stall, if any.
func (p *progress) result(cpu cpuSpan, version, why string) groupResult {
	var dup int64
	for i := range p.seen {
		if n := p.seen[i].Load(); n > 1 {
			dup += int64(n - 1)
		}
	}
	missing := p.records - min(p.distinct.Load(), p.records)
	if why != "" {
		p.first.set("%s", why)
	}
	if missing > 0 {
		p.first.set("%d records never handed out", missing)
	}
	p.mu.Lock()
	tl := p.tl
	p.mu.Unlock()
	return groupResult{
		tl:         tl,
		delivered:  p.delivered.Load(),
		duplicates: dup,
		failed:     p.bad.Load() + missing,
		cpu:        cpu,
		version:    version,
		err:        p.first.get(),
	}
}

func (r groupResult) line() string {
	us := func(ev int, d time.Duration) string {
		if !r.tl.set[ev] {
			return "-"
		}
		return fmt.Sprint(d.Microseconds())
	}
	line := fmt.Sprintf("GROUP assigned=%s leave=%s owned=%s resumed=%s done=%s delivered=%d duplicates=%d failed=%d user_us=%d sys_us=%d version=%s",
		us(evAssigned, r.tl.assigned), us(evLeave, r.tl.leave), us(evOwned, r.tl.owned),
		us(evResumed, r.tl.resumed), us(evDone, r.tl.done),
		r.delivered, r.duplicates, r.failed, r.cpu.user, r.cpu.sys, r.version)
	if r.err != "" {
		line += " error=" + strings.Join(strings.Fields(r.err), " ")
	}
	return line
}

var debugOn = os.Getenv("KAFKIT_GO_PEER_DEBUG") != ""

func debugf(format string, args ...any) {
	if debugOn {
		note(format, args...)
	}
}
