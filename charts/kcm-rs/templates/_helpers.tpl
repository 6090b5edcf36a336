{{/* The labels every object carries: manifests/base's, and Helm's standard
ones (e2e/tests/chart.rs compares the chart with kustomize without the
latter four, and checks they are on every object). */}}
{{- define "kcm-rs.labels" -}}
app.kubernetes.io/name: kcm-rs
{{ include "kcm-rs.helmLabels" . }}
{{- end }}

{{- define "kcm-rs.helmLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The image: repository:tag, pinned by digest when image.digest is set. */}}
{{- define "kcm-rs.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}

{{/* --controllers: job-controller beside KCM unless set otherwise. */}}
{{- define "kcm-rs.controllersFlag" -}}
{{- $c := .Values.controllers -}}
{{- if and .Values.besideKcm.enabled (eq (join "," $c) "*") -}}
job-controller
{{- else -}}
{{ join "," $c }}
{{- end -}}
{{- end }}

{{/*
The controllers kcm-rs will run, by KCM name, space-separated in the
registry's order: --controllers resolved as the binary does ("*" all four,
names and aliases, "-name" off and winning), job-controller alone beside KCM
with controllers left at "*". Fails on an unknown name, on nothing selected,
and beside KCM on anything but job-controller (KCM runs the others there).
*/}}
{{- define "kcm-rs.selected" -}}
{{- $known := dict "job-controller" "job-controller" "job" "job-controller" "pod-garbage-collector-controller" "pod-garbage-collector-controller" "podgc" "pod-garbage-collector-controller" "taint-eviction-controller" "taint-eviction-controller" "disruption-controller" "disruption-controller" "disruption" "disruption-controller" -}}
{{- $all := list "job-controller" "pod-garbage-collector-controller" "taint-eviction-controller" "disruption-controller" -}}
{{- $star := false -}}
{{- $on := list -}}
{{- $off := list -}}
{{- range $entry := splitList "," (include "kcm-rs.controllersFlag" .) -}}
{{- $item := trim $entry -}}
{{- if eq $item "*" -}}
{{- $star = true -}}
{{- else if $item -}}
{{- $name := trimPrefix "-" $item -}}
{{- $canonical := get $known $name -}}
{{- if not $canonical -}}
{{- fail (printf "controllers: unknown controller %q; kcm-rs has job-controller, pod-garbage-collector-controller, taint-eviction-controller and disruption-controller (aliases job, podgc, disruption)" $name) -}}
{{- end -}}
{{- if hasPrefix "-" $item -}}
{{- $off = append $off $canonical -}}
{{- else -}}
{{- $on = append $on $canonical -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $selected := list -}}
{{- range $all -}}
{{- if and (not (has . $off)) (or $star (has . $on)) -}}
{{- $selected = append $selected . -}}
{{- end -}}
{{- end -}}
{{- if not $selected -}}
{{- fail (printf "controllers %v select no controller" .Values.controllers) -}}
{{- end -}}
{{- if and .Values.besideKcm.enabled (ne (join " " $selected) "job-controller") -}}
{{- fail (printf "besideKcm.enabled runs kcm-rs beside a complete kube-controller-manager, which runs pod GC, taint eviction and disruption itself: controllers must be [\"*\"] or [\"job-controller\"], not %v (selects %s)" .Values.controllers (join ", " $selected)) -}}
{{- end -}}
{{ join " " $selected }}
{{- end }}

{{/* The selected controllers' ServiceAccount suffixes (KCM's client names),
in rbac.yaml's order. */}}
{{- define "kcm-rs.accounts" -}}
{{- $client := dict "job-controller" "job-controller" "pod-garbage-collector-controller" "pod-garbage-collector" "taint-eviction-controller" "taint-eviction-controller" "disruption-controller" "disruption-controller" -}}
{{- $out := list -}}
{{- range splitList " " (include "kcm-rs.selected" .) -}}
{{- $out = append $out (get $client .) -}}
{{- end -}}
{{ join " " $out }}
{{- end }}

{{/* Combinations that cannot work, each refused with what to change. */}}
{{- define "kcm-rs.validate" -}}
{{- /* helm upgrade --reuse-values keeps the old chart's defaults: keys this
chart added are missing, which would render nil (or fail obscurely). */ -}}
{{- range $key := list "priorityClassQuota" "podAnnotations" "podLabels" "healthPort" -}}
{{- if not (hasKey $.Values $key) -}}
{{- fail (printf "the values have no %s, which chart %s added: they come from an older chart's release (helm upgrade --reuse-values keeps that chart's defaults); upgrade with --reset-then-reuse-values, or with -f your values file (charts/kcm-rs/UPGRADING.md)" $key $.Chart.Version) -}}
{{- end -}}
{{- end -}}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.replicas) 1) -}}
{{- fail (printf "leaderElection.enabled=false with replicas=%d: every replica would run the controllers at once (two Job controllers create pods twice); set replicas=1 or enable leader election" (int .Values.replicas)) -}}
{{- end -}}
{{- if and .Values.identities.perController (eq .Values.identities.prefix "") -}}
{{- fail "identities.prefix is empty: the controllers' ServiceAccounts would be kube-controller-manager's own names (job-controller, ...), which kube-apiserver binds to its broad system:controller:* roles in kube-system; keep a prefix (default kcm-rs-)" -}}
{{- end -}}
{{- if and .Values.besideKcm.enabled (not .Values.besideKcm.managedBy) -}}
{{- fail "besideKcm.enabled needs besideKcm.managedBy, the spec.managedBy value of the Jobs kcm-rs syncs" -}}
{{- end -}}
{{- range $k, $_ := .Values.podLabels -}}
{{- if or (eq $k "app.kubernetes.io/name") (hasKey (include "kcm-rs.labels" $ | fromYaml) $k) (eq $k "app.kubernetes.io/component") -}}
{{- fail (printf "podLabels: %s is set by the chart (app.kubernetes.io/name is the Deployment's selector); choose another label" $k) -}}
{{- end -}}
{{- end -}}
{{- $_ := include "kcm-rs.selected" . -}}
{{- end }}

{{/* The ResourceQuota GKE needs before it admits pods of a system-*-critical
PriorityClass outside kube-system: true where the chart renders it. */}}
{{- define "kcm-rs.priorityClassQuota" -}}
{{- if and .Values.priorityClassQuota.enabled (ne .Release.Namespace "kube-system") (has .Values.priorityClassName (list "system-cluster-critical" "system-node-critical")) -}}
true
{{- end -}}
{{- end }}

{{/* --feature-gates from the featureGates map, sorted by name. */}}
{{- define "kcm-rs.featureGates" -}}
{{- $gates := list -}}
{{- range $name, $on := .Values.featureGates -}}
{{- $gates = append $gates (printf "%s=%t" $name $on) -}}
{{- end -}}
{{ join "," $gates }}
{{- end }}
