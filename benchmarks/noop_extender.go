// A no-op scheduler extender in Go: the floor of the extender protocol itself.
//
// kube-scheduler 1.20 calls an extender's /filter and /prioritize one pod at a time in
// its scheduling cycle and /bind beside it. This server does no scheduling: /filter keeps
// every node named, /prioritize scores each 0, /bind writes the Binding to kube-apiserver.
// Written in Go with the standard library (Go's HTTP server, kept-alive connections to the
// API server) so that what it costs is kube-scheduler's own per-call price, not a Python
// server's: bench_pipeline.py --noop go runs kube-scheduler against it, beside the Python
// no-op (noop_extender.py), which has the transport of hami scheduler.
//
//	go build -o noop-extender benchmarks/noop_extender.go
//	noop-extender -addr 127.0.0.1:P -api https://127.0.0.1:6443 -token T -ca ca.crt
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
)

type args struct {
	Pod       json.RawMessage `json:"Pod"`
	NodeNames *[]string       `json:"NodeNames"`
	Nodes     *struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	} `json:"Nodes"`
}

func (a *args) names() []string {
	if a.NodeNames != nil {
		return *a.NodeNames
	}
	out := []string{}
	if a.Nodes != nil {
		for _, n := range a.Nodes.Items {
			out = append(out, n.Metadata.Name)
		}
	}
	return out
}

type bindArgs struct {
	PodName, PodNamespace, PodUID, Node string
}

func reply(w http.ResponseWriter, v interface{}) {
	data, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Write(data)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	api := flag.String("api", "", "kube-apiserver URL")
	token := flag.String("token", "", "bearer token")
	ca := flag.String("ca", "", "kube-apiserver CA file")
	flag.Parse()
	pool := x509.NewCertPool()
	if pem, err := os.ReadFile(*ca); err == nil {
		pool.AppendCertsFromPEM(pem)
	} else {
		log.Fatalf("-ca: %v", err)
	}
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool},
		MaxIdleConnsPerHost: 64,
	}}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { reply(w, "ok") })
	mux.HandleFunc("/filter", func(w http.ResponseWriter, r *http.Request) {
		var a args
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			reply(w, map[string]string{"Error": err.Error()})
			return
		}
		reply(w, map[string]interface{}{
			"NodeNames": a.names(), "FailedNodes": map[string]string{},
			"FailedAndUnresolvableNodes": map[string]string{}, "Error": "",
		})
	})
	mux.HandleFunc("/prioritize", func(w http.ResponseWriter, r *http.Request) {
		var a args
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			reply(w, []interface{}{})
			return
		}
		out := make([]map[string]interface{}, 0)
		for _, n := range a.names() {
			out = append(out, map[string]interface{}{"Host": n, "Score": 0})
		}
		reply(w, out)
	})
	mux.HandleFunc("/bind", func(w http.ResponseWriter, r *http.Request) {
		var b bindArgs
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			reply(w, map[string]string{"Error": err.Error()})
			return
		}
		body, _ := json.Marshal(map[string]interface{}{
			"apiVersion": "v1", "kind": "Binding",
			"metadata": map[string]string{"name": b.PodName, "uid": b.PodUID},
			"target":   map[string]string{"apiVersion": "v1", "kind": "Node", "name": b.Node},
		})
		url := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s/binding",
			strings.TrimRight(*api, "/"), b.PodNamespace, b.PodName)
		req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+*token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			reply(w, map[string]string{"Error": err.Error()})
			return
		}
		defer resp.Body.Close()
		text, _ := io.ReadAll(resp.Body) // to the end: the connection is reused
		if resp.StatusCode >= 300 {
			reply(w, map[string]string{"Error": fmt.Sprintf("binding: %d %s", resp.StatusCode, text)})
			return
		}
		reply(w, map[string]string{"Error": ""})
	})
	log.Fatal(http.ListenAndServe(*addr, mux))
}
