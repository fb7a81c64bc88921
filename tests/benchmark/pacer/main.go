// Command pacer is a TCP proxy that limits each connection's server-to-client bytes to a
// rate, as a token bucket with absolute deadlines: a chunk of n bytes is released at
// previous release + n/rate, or now - burst/rate + n/rate after waiting on the server.
// Sleeping late does not lower the average rate (later chunks catch up), and an idle
// connection saves at most `burst` bytes. The rate can be changed while running:
// PUT /rate?bytes_per_s=N on the control address (0 turns pacing off). Both addresses
// are given on the command line; the benchmark harness binds them to 127.0.0.1.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

var rate atomic.Int64 // bytes per second; 0 = unpaced

// A read from the server that blocks longer than this means the connection was idle: a
// new request behind the 25 ms request latency of the lambda-s3 profile. Shorter waits
// are the server (or this busy machine) being slow to refill the socket, and keep the
// schedule, so that a stall is made up by the chunks after it.
const idleAfter = 20 * time.Millisecond

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address clients connect to")
	upstream := flag.String("upstream", "", "address of the server")
	control := flag.String("control", "127.0.0.1:0", "address of the control API")
	initial := flag.Int64("bytes-per-s", 0, "initial per-connection rate (0 = unpaced)")
	burst := flag.Int("burst", 256<<10, "bytes an idle connection may send at once")
	chunk := flag.Int("chunk", 64<<10, "largest read from the server")
	flag.Parse()
	rate.Store(*initial)

	http.HandleFunc("/rate", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			v, err := strconv.ParseInt(r.URL.Query().Get("bytes_per_s"), 10, 64)
			if err != nil || v < 0 {
				http.Error(w, "bytes_per_s must be a non-negative integer", http.StatusBadRequest)
				return
			}
			rate.Store(v)
		}
		fmt.Fprintf(w, "%d\n", rate.Load())
	})
	go func() { log.Fatal(http.ListenAndServe(*control, nil)) }()

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	for {
		client, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(client.(*net.TCPConn), *upstream, *burst, *chunk)
	}
}

func serve(client *net.TCPConn, upstream string, burst, chunk int) {
	defer client.Close()
	conn, err := net.Dial("tcp", upstream)
	if err != nil {
		log.Printf("dial %s: %v", upstream, err)
		return
	}
	server := conn.(*net.TCPConn)
	defer server.Close()
	go func() {
		// A plain buffer: not io.Copy, whose splice path (TCPConn.ReadFrom) delays small
		// requests by milliseconds.
		up := make([]byte, 32<<10)
		for {
			n, err := client.Read(up)
			if n > 0 {
				if _, werr := server.Write(up[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		_ = server.CloseWrite()
	}()
	buf := make([]byte, chunk)
	var release time.Time
	for {
		asked := time.Now()
		n, err := server.Read(buf)
		if n > 0 {
			if r := rate.Load(); r > 0 {
				// Credit is capped only after waiting for the server (an idle connection).
				// A sleep that overran (timers on a busy machine wake milliseconds late)
				// is made up by the next chunks, so the average rate holds.
				now := time.Now()
				floor := now.Add(-time.Duration(int64(burst) * int64(time.Second) / r))
				if (release.IsZero() || now.Sub(asked) > idleAfter) && release.Before(floor) {
					release = floor
				}
				release = release.Add(time.Duration(int64(n) * int64(time.Second) / r))
				if wait := time.Until(release); wait > 0 {
					time.Sleep(wait)
				}
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = client.CloseWrite()
			return
		}
	}
}
