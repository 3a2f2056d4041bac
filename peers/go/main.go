// Command kafkit-go-peer runs the cross-client bench's producer and consumer workloads with a Go
// client, franz-go or segmentio/kafka-go, and prints the one RESULT line the harness reads
// (bench/src; the contract is the issue 38 peer contract: flags, record layout, checks, result).
//
//	kafkit-go-peer produce --client franz-go|kafka-go --bootstrap HOST:PORT --topic T ...
//	kafkit-go-peer consume --client franz-go|kafka-go --bootstrap HOST:PORT --topic T ...
//	kafkit-go-peer group --client franz-go|kafka-go --bootstrap HOST:PORT --topic T --group-id G ...
//
// `group` prints one GROUP line instead (a group of members in this process: group.go).
//
// Exit codes: 0 when the run happened (even with failed records), 2 for bad flags or a client
// that cannot start, 3 when the chosen client cannot do what was asked (kafka-go has neither
// idempotence nor transactions nor a cooperative group protocol): the harness shows "n/a" for
// that cell.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Exit codes besides 0 (the run happened).
const (
	exitUsage       = 2
	exitUnsupported = 3
)

// errUnsupported marks a setting the chosen client cannot apply at all (not one it approximates
// or ignores): main exits with exitUnsupported.
var errUnsupported = errors.New("unsupported by this client")

// result is what one run measured, printed as the RESULT line.
type result struct {
	delivered, failed int64
	wall              time.Duration
	cpu               cpuSpan
	requests          int64 // -1: the client cannot say
	bytes             int64
	version           string
	err               string
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kafkit-go-peer produce|consume|group --client franz-go|kafka-go [--flag value]...")
		os.Exit(exitUsage)
	}
	var (
		res result
		err error
	)
	switch cmd := os.Args[1]; cmd {
	case "produce":
		var o produceOpts
		if o, err = parseProduce(os.Args[2:]); err == nil {
			res, err = produce(o)
		}
	case "consume":
		var o consumeOpts
		if o, err = parseConsume(os.Args[2:]); err == nil {
			res, err = consume(o)
		}
	case "group":
		var o groupOpts
		var gr groupResult
		if o, err = parseGroup(os.Args[2:]); err == nil {
			if gr, err = group(o); err == nil {
				fmt.Println(gr.line())
				return
			}
		}
	default:
		err = fmt.Errorf("unknown subcommand %q (produce, consume or group)", cmd)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kafkit-go-peer: %v\n", err)
		if errors.Is(err, errUnsupported) {
			os.Exit(exitUnsupported)
		}
		os.Exit(exitUsage)
	}
	fmt.Println(res.line())
}

func produce(o produceOpts) (result, error) {
	if o.client == "kafka-go" && (o.txnRecords > 0 || o.idempotence) {
		return result{}, fmt.Errorf("kafka-go has no idempotent producer nor transactions: %w", errUnsupported)
	}
	if err := waitTopic(&o.common); err != nil {
		return result{}, err
	}
	switch o.client {
	case "franz-go":
		return franzProduce(o)
	case "kafka-go":
		return kafkaGoProduce(o)
	}
	return result{}, fmt.Errorf("unknown --client %q (franz-go or kafka-go)", o.client)
}

func consume(o consumeOpts) (result, error) {
	if err := waitTopic(&o.common); err != nil {
		return result{}, err
	}
	switch o.client {
	case "franz-go":
		return franzConsume(o)
	case "kafka-go":
		return kafkaGoConsume(o)
	}
	return result{}, fmt.Errorf("unknown --client %q (franz-go or kafka-go)", o.client)
}

func (r result) line() string {
	requests := "-"
	if r.requests >= 0 {
		requests = fmt.Sprint(r.requests)
	}
	line := fmt.Sprintf("RESULT delivered=%d failed=%d wall_us=%d user_us=%d sys_us=%d requests=%s bytes=%d version=%s",
		r.delivered, r.failed, r.wall.Microseconds(), r.cpu.user, r.cpu.sys, requests, r.bytes, r.version)
	if r.err != "" {
		line += " error=" + strings.Join(strings.Fields(r.err), " ")
	}
	return line
}

// recordValue is every record's value: v bytes, byte j = 'a' + j%26.
func recordValue(v int) []byte {
	b := make([]byte, v)
	for j := range b {
		b[j] = 'a' + byte(j%26)
	}
	return b
}

// cpuSpan is the process's own CPU time (all threads) over a window, in microseconds.
type cpuSpan struct{ user, sys int64 }

// window measures wall and CPU time from its start to end.
type window struct {
	start time.Time
	ru    syscall.Rusage
}

func startWindow() window {
	var w window
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &w.ru)
	w.start = time.Now()
	return w
}

func (w window) end() (time.Duration, cpuSpan) {
	wall := time.Since(w.start)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	us := func(t syscall.Timeval) int64 { return int64(t.Sec)*1_000_000 + int64(t.Usec) }
	return wall, cpuSpan{user: us(ru.Utime) - us(w.ru.Utime), sys: us(ru.Stime) - us(w.ru.Stime)}
}

// firstError keeps the first error reported by any goroutine.
type firstError struct {
	mu  sync.Mutex
	msg string
}

func (f *firstError) set(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.msg == "" {
		f.msg = fmt.Sprintf(format, args...)
	}
}

func (f *firstError) get() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg
}

// note prints a remark about the run on stderr (stdout holds only the RESULT line).
func note(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kafkit-go-peer: "+format+"\n", args...)
}

// modules names the Go modules behind each client's short name.
var modules = map[string]string{
	"franz-go": "github.com/twmb/franz-go",
	"kafka-go": "github.com/segmentio/kafka-go",
}

// moduleVersion is "NAME@VERSION" for a client, the exact module version built into this
// binary (from its build information; go.mod pins it).
func moduleVersion(name string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == modules[name] {
				if dep.Replace != nil {
					dep = dep.Replace
				}
				return name + "@" + dep.Version
			}
		}
	}
	return name + "@unknown"
}
