// The load generator of bench/webhook.py and bench/scaling/admission.py: POSTs AdmissionReviews
// (or pods, to the API server, with a client certificate) over HTTP/1.1 keep-alive TLS
// connections, spread over one or more URLs a connection each in turn (as a Service spreads
// connections over its endpoints), closed-loop (each connection sends its next review when the last is answered) or
// open-loop (reviews scheduled at a fixed rate, latency counted from each one's scheduled send,
// so a server that falls behind is charged for the wait), and reports the latencies and its own
// CPU time as one JSON object. In Go, so that the generator is not what limits the rate. With
// --method GET it sends bodiless GETs instead (a flood of scrapes; no --bodies needed).
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type report struct {
	Sent        int            `json:"sent"`
	Seconds     float64        `json:"seconds"`
	Rate        float64        `json:"rate"`
	P50Ms       float64        `json:"p50_ms"`
	P99Ms       float64        `json:"p99_ms"`
	MaxMs       float64        `json:"max_ms"`
	Statuses    map[string]int `json:"statuses"`
	CPUSeconds  float64        `json:"cpu_seconds"`
	FirstErrors []string       `json:"first_errors"`
}

type results struct {
	mu        sync.Mutex
	latencies []time.Duration
	statuses  map[string]int
	errors    []string
}

func (r *results) add(latency time.Duration, status string, problem string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latencies = append(r.latencies, latency)
	r.statuses[status]++
	if problem != "" && len(r.errors) < 5 {
		r.errors = append(r.errors, problem)
	}
}

func readBodies(path string) ([][]byte, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var bodies [][]byte
	scanner := bufio.NewScanner(file)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	for scanner.Scan() {
		if line := bytes.TrimSpace(scanner.Bytes()); len(line) > 0 {
			bodies = append(bodies, append([]byte(nil), line...))
		}
	}
	if len(bodies) == 0 {
		return nil, fmt.Errorf("%s: no bodies (one JSON review per line)", path)
	}
	return bodies, scanner.Err()
}

func newClient(cafile, certfile, keyfile string, conns int, timeout time.Duration) (*http.Client, error) {
	pem, err := os.ReadFile(cafile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", cafile)
	}
	config := &tls.Config{RootCAs: pool}
	if certfile != "" {
		pair, err := tls.LoadX509KeyPair(certfile, keyfile)
		if err != nil {
			return nil, err
		}
		config.Certificates = []tls.Certificate{pair}
	}
	transport := &http.Transport{
		TLSClientConfig:     config,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		ForceAttemptHTTP2:   false,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1 only
	}
	return &http.Client{Transport: transport, Timeout: timeout}, nil
}

func send(client *http.Client, url string, body []byte) (string, string) {
	var response *http.Response
	var err error
	if body == nil {
		response, err = client.Get(url)
	} else {
		response, err = client.Post(url, "application/json", bytes.NewReader(body))
	}
	if err != nil {
		return "error", err.Error()
	}
	answer, err := io.ReadAll(response.Body)
	response.Body.Close()
	if err != nil {
		return "error", err.Error()
	}
	status := fmt.Sprint(response.StatusCode)
	if response.StatusCode/100 != 2 { // 200 for a review, 201 for a pod created
		if len(answer) > 200 {
			answer = answer[:200]
		}
		return status, fmt.Sprintf("HTTP %s: %s", status, answer)
	}
	return status, ""
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	seconds := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return seconds(usage.Utime) + seconds(usage.Stime)
}

func quantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	index := int(q * float64(len(sorted)-1))
	return float64(sorted[index]) / float64(time.Millisecond)
}

func main() {
	urlList := flag.String("url", "", "https://HOST:PORT/mutate?timeout=10s, or several, comma-separated")
	cafile := flag.String("cafile", "", "the server certificate's CA (PEM)")
	certfile := flag.String("cert", "", "a client certificate (PEM), for the API server")
	keyfile := flag.String("key", "", "the client certificate's key (PEM)")
	bodiesFile := flag.String("bodies", "", "file of request bodies, one JSON review per line")
	conns := flag.Int("conns", 4, "keep-alive connections")
	duration := flag.Duration("duration", 10*time.Second, "how long to send")
	rate := flag.Float64("rate", 0, "reviews per second, scheduled (open loop); 0: closed loop")
	timeout := flag.Duration("timeout", 30*time.Second, "one request's timeout")
	method := flag.String("method", "POST", "POST (the bodies) or GET (no body)")
	flag.Parse()
	bodies := [][]byte{nil}
	var err error
	if *method != "GET" {
		if bodies, err = readBodies(*bodiesFile); err != nil {
			fmt.Fprintln(os.Stderr, "goload:", err)
			os.Exit(2)
		}
	}
	urls := strings.Split(*urlList, ",")
	// one client per URL: each keeps its own connections, as a Service's endpoints do
	clients := make([]*http.Client, len(urls))
	for u := range urls {
		if clients[u], err = newClient(*cafile, *certfile, *keyfile, *conns, *timeout); err != nil {
			fmt.Fprintln(os.Stderr, "goload:", err)
			os.Exit(2)
		}
	}
	res := &results{statuses: map[string]int{}}
	var next atomic.Int64 // index of the next review (and, open loop, of its slot)
	cpuStart := cpuSeconds()
	start := time.Now()
	end := start.Add(*duration)
	var wg sync.WaitGroup
	for c := 0; c < *conns; c++ {
		wg.Add(1)
		url, client := urls[c%len(urls)], clients[c%len(urls)]
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				began := time.Now()
				if *rate > 0 {
					began = start.Add(time.Duration(float64(i) / *rate * float64(time.Second)))
					if began.After(end) {
						return
					}
					time.Sleep(time.Until(began))
				} else if began.After(end) {
					return
				}
				status, problem := send(client, url, bodies[int(i)%len(bodies)])
				res.add(time.Since(began), status, problem)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	sort.Slice(res.latencies, func(a, b int) bool { return res.latencies[a] < res.latencies[b] })
	out := report{
		Sent:        len(res.latencies),
		Seconds:     elapsed,
		Rate:        float64(len(res.latencies)) / elapsed,
		P50Ms:       quantile(res.latencies, 0.50),
		P99Ms:       quantile(res.latencies, 0.99),
		MaxMs:       quantile(res.latencies, 1.0),
		Statuses:    res.statuses,
		CPUSeconds:  cpuSeconds() - cpuStart,
		FirstErrors: res.errors,
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}
