{{/* The labels every object carries (as manifests/base). */}}
{{- define "kcm-rs.labels" -}}
app.kubernetes.io/name: kcm-rs
{{- end }}

{{/* The four controllers' ServiceAccount suffixes, in rbac.yaml's order. */}}
{{- define "kcm-rs.controllers" -}}
job-controller pod-garbage-collector taint-eviction-controller disruption-controller
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

{{/* --feature-gates from the featureGates map, sorted by name. */}}
{{- define "kcm-rs.featureGates" -}}
{{- $gates := list -}}
{{- range $name, $on := .Values.featureGates -}}
{{- $gates = append $gates (printf "%s=%t" $name $on) -}}
{{- end -}}
{{ join "," $gates }}
{{- end }}
