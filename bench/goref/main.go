// A reference for bench/webhook.py: a mutating webhook in Go's standard library that does what
// our webhook does for a pod without GPUs (read the AdmissionReview, look at the annotation and
// resource keys for a GPU name, answer "allowed" with no patch), over TLS with keep-alive.
// A controller-runtime webhook decodes into typed objects and does more per review, so this is
// the cheaper side of "a Go webhook doing the same".
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"strings"
)

// gpuKeyPrefixes mirrors vgpu_bridge/webhook/fastpath.py's GPU_KEY_PREFIXES.
var gpuKeyPrefixes = []string{"nvidia.com/", "volcano.sh/vgpu", "hami.io/", "gpu-fraction", "gpu-memory"}

type admissionReview struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID    string         `json:"uid"`
		Object map[string]any `json:"object"`
	} `json:"request"`
}

func hasGPUKey(section any) bool {
	keys, isMap := section.(map[string]any)
	if !isMap {
		return section != nil
	}
	for key := range keys {
		for _, prefix := range gpuKeyPrefixes {
			if strings.HasPrefix(key, prefix) {
				return true
			}
		}
	}
	return false
}

func mayAskForGPUs(pod map[string]any) bool {
	metadata, _ := pod["metadata"].(map[string]any)
	spec, _ := pod["spec"].(map[string]any)
	if metadata == nil || spec == nil || hasGPUKey(metadata["annotations"]) {
		return true
	}
	for _, field := range []string{"containers", "initContainers"} {
		containers, _ := spec[field].([]any)
		for _, container := range containers {
			fields, _ := container.(map[string]any)
			resources, _ := fields["resources"].(map[string]any)
			if hasGPUKey(resources["limits"]) || hasGPUKey(resources["requests"]) {
				return true
			}
		}
	}
	return false
}

func mutate(w http.ResponseWriter, r *http.Request) {
	var review admissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "body is not an AdmissionReview", http.StatusBadRequest)
		return
	}
	if mayAskForGPUs(review.Request.Object) {
		http.Error(w, "the reference answers pods without GPUs only", http.StatusNotImplemented)
		return
	}
	answer := map[string]any{
		"apiVersion": "admission.k8s.io/v1",
		"kind":       "AdmissionReview",
		"response":   map[string]any{"uid": review.Request.UID, "allowed": true},
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(answer)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8443", "address to serve HTTPS on")
	certFile := flag.String("tls-cert-file", "", "serving certificate (PEM)")
	keyFile := flag.String("tls-key-file", "", "its key (PEM)")
	flag.Parse()
	http.HandleFunc("/mutate", mutate)
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	log.Fatal(http.ListenAndServeTLS(*listen, *certFile, *keyFile, nil))
}
