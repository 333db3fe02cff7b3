// A Prometheus remote-write client built on Prometheus's own prompb package: it posts a
// WriteRequest (snappy block format, remote write 1.0) to the URL in its first argument, with
// FLOE_TOKEN as a bearer token, and prints the answer. Floe's interop tests run it
// (tests/interop/test_remote_write.py); scripts/setup-remote-write.sh builds it.
package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: floe-rw-client URL START_MS")
		os.Exit(2)
	}
	start, err := strconv.ParseInt(os.Args[2], 10, 64)
	if err != nil {
		panic(err)
	}
	var series []prompb.TimeSeries
	for _, code := range []string{"200", "500"} {
		var samples []prompb.Sample
		for i := int64(0); i < 5; i++ {
			samples = append(samples, prompb.Sample{Value: float64(i + 1), Timestamp: start + i*15000})
		}
		series = append(series, prompb.TimeSeries{
			// Sorted by name, as Prometheus sends them.
			Labels: []prompb.Label{
				{Name: "__name__", Value: "http_requests_total"},
				{Name: "code", Value: code},
				{Name: "instance", Value: "app:9090"},
				{Name: "job", Value: "api"},
			},
			Samples: samples,
		})
	}
	series = append(series, prompb.TimeSeries{
		Labels:  []prompb.Label{{Name: "__name__", Value: "temperature_celsius"}, {Name: "job", Value: "sensors"}},
		Samples: []prompb.Sample{{Value: 21.5, Timestamp: start}},
	})
	request := &prompb.WriteRequest{
		Timeseries: series,
		Metadata: []prompb.MetricMetadata{
			{Type: prompb.MetricMetadata_COUNTER, MetricFamilyName: "http_requests_total", Help: "requests served"},
			{Type: prompb.MetricMetadata_GAUGE, MetricFamilyName: "temperature_celsius", Help: "temperature", Unit: "celsius"},
		},
	}
	raw, err := request.Marshal()
	if err != nil {
		panic(err)
	}
	post, err := http.NewRequest("POST", os.Args[1], bytes.NewReader(snappy.Encode(nil, raw)))
	if err != nil {
		panic(err)
	}
	post.Header.Set("Content-Encoding", "snappy")
	post.Header.Set("Content-Type", "application/x-protobuf")
	post.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	post.Header.Set("User-Agent", "floe-rw-client/1")
	if token := os.Getenv("FLOE_TOKEN"); token != "" {
		post.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	answer, err := client.Do(post)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(answer.Body)
	fmt.Println(answer.StatusCode, string(body))
	if answer.StatusCode/100 != 2 {
		os.Exit(1)
	}
}
