// A Prometheus remote-write client built on Prometheus's own prompb packages: it posts a
// request (snappy block format) to the URL in its first argument, with FLOE_TOKEN as a bearer
// token, and prints the answer — a remote write 1.0 WriteRequest, or with "v2" as its third
// argument a 2.0 Request (symbols, metadata on every series, an exemplar, native histograms
// built with Prometheus's own histogram types) and the written counts the answer's headers
// give. Floe's interop tests run it (tests/interop/test_remote_write.py);
// scripts/setup-remote-write.sh builds it.
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
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: floe-rw-client URL START_MS [v2]")
		os.Exit(2)
	}
	start, err := strconv.ParseInt(os.Args[2], 10, 64)
	if err != nil {
		panic(err)
	}
	raw, contentType, version := v1Request(start), "application/x-protobuf", "0.1.0"
	if len(os.Args) > 3 && os.Args[3] == "v2" {
		raw = v2Request(start)
		contentType, version = "application/x-protobuf;proto=io.prometheus.write.v2.Request", "2.0.0"
	}
	post, err := http.NewRequest("POST", os.Args[1], bytes.NewReader(snappy.Encode(nil, raw)))
	if err != nil {
		panic(err)
	}
	post.Header.Set("Content-Encoding", "snappy")
	post.Header.Set("Content-Type", contentType)
	post.Header.Set("X-Prometheus-Remote-Write-Version", version)
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
	for _, written := range []string{"Samples", "Histograms", "Exemplars"} {
		if count := answer.Header.Get("X-Prometheus-Remote-Write-" + written + "-Written"); count != "" {
			fmt.Printf("%s-written %s\n", written, count)
		}
	}
	if answer.StatusCode/100 != 2 {
		os.Exit(1)
	}
}

// A 1.0 WriteRequest: a counter of two series, five samples each, and a gauge, with the
// families' metadata.
func v1Request(start int64) []byte {
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
	return raw
}

// A 2.0 Request: the same counter (its exemplar in an entry of its own, as Prometheus sends
// them), a gauge with a unit, a native histogram of schema 0 and one of custom buckets.
func v2Request(start int64) []byte {
	symbols := writev2.NewSymbolTable()
	counter := writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_COUNTER, HelpRef: symbols.Symbolize("requests served")}
	var series []writev2.TimeSeries
	for _, code := range []string{"200", "500"} {
		refs := symbols.SymbolizeLabels(labels.FromStrings(
			"__name__", "http_requests_total", "code", code, "instance", "app:9090", "job", "api"), nil)
		for i := int64(0); i < 5; i++ {
			series = append(series, writev2.TimeSeries{
				LabelsRefs: refs,
				Samples:    []writev2.Sample{{Value: float64(i + 1), Timestamp: start + i*15000, StartTimestamp: start - 60000}},
				Metadata:   counter,
			})
		}
		series = append(series, writev2.TimeSeries{
			LabelsRefs: refs,
			Exemplars: []writev2.Exemplar{{
				LabelsRefs: symbols.SymbolizeLabels(labels.FromStrings("trace_id", "4bf92f3577b34da6a3ce929d0e0e4736", "user", code), nil),
				Value:      0.25,
				Timestamp:  start,
			}},
			Metadata: counter,
		})
	}
	series = append(series, writev2.TimeSeries{
		LabelsRefs: symbols.SymbolizeLabels(labels.FromStrings("__name__", "temperature", "job", "sensors"), nil),
		Samples:    []writev2.Sample{{Value: 21.5, Timestamp: start}},
		Metadata: writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE,
			HelpRef: symbols.Symbolize("temperature"), UnitRef: symbols.Symbolize("celsius")},
	})
	histogramMetadata := writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_HISTOGRAM, UnitRef: symbols.Symbolize("seconds")}
	exponential := &histogram.Histogram{
		Schema: 0, Count: 7, Sum: 10.5, ZeroThreshold: 1e-128, ZeroCount: 1,
		// Buckets (1,2] and (2,4] hold 2 and 3; bucket [-1,-0.5) holds 1.
		PositiveSpans: []histogram.Span{{Offset: 1, Length: 2}}, PositiveBuckets: []int64{2, 1},
		NegativeSpans: []histogram.Span{{Offset: 0, Length: 1}}, NegativeBuckets: []int64{1},
	}
	custom := &histogram.Histogram{
		Schema: histogram.CustomBucketsSchema, Count: 4, Sum: 2,
		CustomValues:  []float64{0.1, 1},
		PositiveSpans: []histogram.Span{{Offset: 0, Length: 3}}, PositiveBuckets: []int64{1, 1, -1},
	}
	for name, h := range map[string]*histogram.Histogram{"latency_seconds": exponential, "duration_seconds": custom} {
		series = append(series, writev2.TimeSeries{
			LabelsRefs: symbols.SymbolizeLabels(labels.FromStrings("__name__", name, "job", "api"), nil),
			Histograms: []writev2.Histogram{writev2.FromIntHistogram(0, start, h)},
			Metadata:   histogramMetadata,
		})
	}
	request := &writev2.Request{Symbols: symbols.Symbols(), Timeseries: series}
	raw, err := request.Marshal()
	if err != nil {
		panic(err)
	}
	return raw
}
