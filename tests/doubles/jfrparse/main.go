// Command jfrparse is the Pyroscope double's reading of a Java agent's upload (tests/doubles/pyroscope_jfr.py runs
// it): the request body of `POST /ingest?format=jfr` on standard input, its query string and Content-Type as
// arguments, and on standard output the push.v1.PushRequest (protobuf) that Pyroscope's JFR converter hands on — one
// series per profile, its labels as Pyroscope names them, its pprof as grafana/jfr-parser builds it.
//
// It is written from grafana/pyroscope, not copied:
//
//   - pkg/ingester/pyroscope/ingest_handler.go parseInputMetadataFromRequest: `name` parsed by the API module's
//     labelset.Parse, `from`/`until` (attime.Parse's Unix forms; absent: now), `sampleRate` (absent or bad: 100),
//     `spyName` (absent: "unknown");
//   - pkg/og/convert/jfr/profile.go ParseToPprof and loadJFRFromForm: a multipart body's `jfr` part and its `labels`
//     part (a LabelsSnapshot), each gunzipped when it starts with gzip's magic bytes; a body that is not multipart
//     is the recording as it is; then jfr-parser's pprof.ParseJFR and, per profile, its pyroscope.Labels.
//
// The parsing itself is jfr-parser's, the library Pyroscope calls (go.mod pins the version Pyroscope's go.mod
// names), so the double accepts what Pyroscope accepts — e.g. async-profiler chunks with an empty constant pool,
// which the JDK's `jfr` tool refuses. A refused upload: its message on standard error, exit status 1 (the double
// answers 400 with it); a bad invocation: exit status 2.
package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"time"

	jfrpprof "github.com/grafana/jfr-parser/pprof"
	jfrpyroscope "github.com/grafana/jfr-parser/pprof/pyroscope"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/model/labelset"
)

const defaultSampleRate = 100 // Pyroscope's types.DefaultSampleRate

// formMemory is what Pyroscope's loadJFRFromForm lets multipart.Reader.ReadForm keep in memory.
const formMemory = 32 << 20

func main() {
	query := flag.String("query", "", "the upload's query string (name=…&from=…&until=…&sampleRate=…&spyName=…)")
	contentType := flag.String("content-type", "", "the upload's Content-Type header")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: jfrparse -query QUERY -content-type TYPE < body > push.pb")
		os.Exit(2)
	}
	body, err := io.ReadAll(os.Stdin)
	if err == nil {
		var out []byte
		if out, err = convert(*query, *contentType, body); err == nil {
			_, err = os.Stdout.Write(out)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type metadata struct {
	labels     *labelset.LabelSet
	start, end time.Time
	sampleRate int64
	spyName    string
}

func parseMetadata(rawQuery string) (metadata, error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return metadata{}, fmt.Errorf("query: %w", err)
	}
	md := metadata{sampleRate: defaultSampleRate, spyName: "unknown"}
	if md.labels, err = labelset.Parse(q.Get("name")); err != nil {
		return metadata{}, fmt.Errorf("name: %w", err)
	}
	if md.start, err = parseTime(q.Get("from")); err != nil {
		return metadata{}, fmt.Errorf("from: %w", err)
	}
	if md.end, err = parseTime(q.Get("until")); err != nil {
		return metadata{}, fmt.Errorf("until: %w", err)
	}
	if rate, err := strconv.Atoi(q.Get("sampleRate")); err == nil && rate >= 0 {
		md.sampleRate = int64(rate)
	}
	if spy := q.Get("spyName"); spy != "" {
		md.spyName = spy
	}
	return md, nil
}

var digitsOnly = regexp.MustCompile(`^\d+$`)

// parseTime reads the Unix forms of Pyroscope's attime.Parse (by length: 13 digits ms, 16 µs, 19 ns, else seconds);
// absent, it is now, as there. Its relative forms ("now-1h") are not modelled: no agent sends them.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Now(), nil
	}
	if !digitsOnly.MatchString(s) {
		return time.Time{}, fmt.Errorf("%q: this double reads Unix times only", s)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	switch len(s) {
	case 13:
		return time.UnixMilli(v), nil
	case 16:
		return time.UnixMicro(v), nil
	case 19:
		return time.Unix(0, v), nil
	}
	return time.Unix(v, 0), nil
}

func convert(rawQuery, contentType string, body []byte) ([]byte, error) {
	md, err := parseMetadata(rawQuery)
	if err != nil {
		return nil, err
	}
	recording, labels := body, new(jfrpprof.LabelsSnapshot)
	if mediaType, _, _ := mime.ParseMediaType(contentType); mediaType == "multipart/form-data" {
		if recording, labels, err = readForm(body, contentType); err != nil {
			return nil, err
		}
	}
	input := jfrpprof.ParseInput{StartTime: md.start, EndTime: md.end, SampleRate: md.sampleRate}
	profiles, err := jfrpprof.ParseJFR(recording, &input, labels)
	if err != nil {
		return nil, err
	}
	req := new(pushv1.PushRequest)
	for _, p := range profiles.Profiles {
		raw, err := p.Profile.MarshalVT()
		if err != nil {
			return nil, err
		}
		series := jfrpyroscope.Labels(md.labels.Labels(), profiles.JFREvent, p.Metric, md.labels.ServiceName(), md.spyName)
		req.Series = append(req.Series, &pushv1.RawProfileSeries{
			Labels:  series,
			Samples: []*pushv1.RawSample{{RawProfile: raw}},
		})
	}
	return req.MarshalVT()
}

// readForm is loadJFRFromForm's reading: the `jfr` part (required) and the optional `labels` part, file parts only.
func readForm(body []byte, contentType string) ([]byte, *jfrpprof.LabelsSnapshot, error) {
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, nil, err
	}
	boundary, ok := params["boundary"]
	if !ok {
		return nil, nil, errors.New("malformed multipart content type header")
	}
	form, err := multipart.NewReader(bytes.NewReader(body), boundary).ReadForm(formMemory)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = form.RemoveAll() }()
	recording, err := filePart(form, "jfr")
	if err != nil {
		return nil, nil, err
	}
	if recording == nil {
		return nil, nil, errors.New("jfr field is required")
	}
	if recording, err = gunzipped(recording); err != nil {
		return nil, nil, fmt.Errorf("loadJFRFromForm failed to decompress jfr: %w", err)
	}
	rawLabels, err := filePart(form, "labels")
	if err != nil {
		return nil, nil, err
	}
	labels := new(jfrpprof.LabelsSnapshot)
	if len(rawLabels) > 0 {
		if rawLabels, err = gunzipped(rawLabels); err != nil {
			return nil, nil, fmt.Errorf("loadJFRFromForm failed to decompress labels: %w", err)
		}
		if err = labels.UnmarshalVT(rawLabels); err != nil {
			return nil, nil, fmt.Errorf("failed to parse labels form field: %w", err)
		}
	}
	return recording, labels, nil
}

// filePart is the first file part of that name, nil when there is none or it is empty.
func filePart(form *multipart.Form, name string) ([]byte, error) {
	files := form.File[name]
	if len(files) == 0 || files[0].Size == 0 {
		return nil, nil
	}
	f, err := files[0].Open()
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return io.ReadAll(f)
}

func gunzipped(b []byte) ([]byte, error) {
	if len(b) < 2 {
		return nil, errors.New("failed to read magic")
	}
	if b[0] != 0x1f || b[1] != 0x8b {
		return b, nil
	}
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("failed to read gzip header: %w", err)
	}
	defer func() { _ = r.Close() }()
	return io.ReadAll(r)
}
