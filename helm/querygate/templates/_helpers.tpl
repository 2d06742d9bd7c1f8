{{/* Chart name, truncated to the 63 characters a label allows. */}}
{{- define "querygate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: the release name, plus the chart name unless it contains it. */}}
{{- define "querygate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "querygate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "querygate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "querygate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "querygate.labels" -}}
helm.sh/chart: {{ include "querygate.chart" . }}
{{ include "querygate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: querygate
{{- end }}

{{- define "querygate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "querygate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "querygate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The admin listener's Service (adminPort > 0): plain HTTP, ClusterIP only. */}}
{{- define "querygate.adminServiceName" -}}
{{- printf "%s-admin" (include "querygate.fullname" . | trunc 57 | trimSuffix "-") }}
{{- end }}

{{/*
The named port Prometheus scrapes: metrics.port, else `admin` when adminPort is set (it needs
no client certificate), else `http`. Refuses `admin` without an adminPort.
*/}}
{{- define "querygate.metricsPort" -}}
{{- $port := .Values.metrics.port | default (ternary "admin" "http" (gt (int .Values.adminPort) 0)) }}
{{- if and (eq $port "admin") (eq (int .Values.adminPort) 0) }}
{{- fail "metrics.port admin needs adminPort" }}
{{- end }}
{{- $auth := (.Values.config.auth | default dict) }}
{{- if and (ne $port "admin") (or $auth.jwt $auth.mtls) }}
{{- fail "with config.auth the main port does not serve /metrics (only server.admin_listen does): set adminPort and leave metrics.port empty or admin" }}
{{- end }}
{{- $port }}
{{- end }}

{{/* The scrape scheme: metrics.scheme, else http on the admin port, else probes.scheme. */}}
{{- define "querygate.metricsScheme" -}}
{{- if .Values.metrics.scheme }}
{{- .Values.metrics.scheme | lower }}
{{- else if eq (include "querygate.metricsPort" .) "admin" }}
{{- "http" }}
{{- else }}
{{- .Values.probes.scheme | lower }}
{{- end }}
{{- end }}

{{/* Mount paths the chart owns (docs/deployment.md lists them). */}}
{{- define "querygate.configDir" -}}/etc/querygate/config{{- end }}
{{- define "querygate.credentialsDir" -}}/var/run/secrets/querygate/credentials{{- end }}
{{- define "querygate.approvalKeysDir" -}}/etc/querygate/approval-keys{{- end }}
{{- define "querygate.tlsDir" -}}/etc/querygate/tls{{- end }}
{{- define "querygate.clientCADir" -}}/etc/querygate/client-ca{{- end }}
{{- define "querygate.jwtDir" -}}/etc/querygate/jwt{{- end }}
{{- define "querygate.databaseDir" -}}/var/run/secrets/querygate/database{{- end }}

{{/*
The querygate configuration file: .Values.config with what the chart owns filled in
(server.listen, server.allowed_hosts, server.drain, server.admin_listen, registry.root,
audit.file.dir, tenants' credentials.env_file).
*/}}
{{- define "querygate.config" -}}
{{- $cfg := deepCopy (default (dict) .Values.config) }}
{{- $server := default (dict) (get $cfg "server") }}
{{- $_ := set $server "listen" (printf "0.0.0.0:%d" (int .Values.containerPort)) }}
{{- if not (hasKey $server "allowed_hosts") }}
{{- $fullname := include "querygate.fullname" . }}
{{- $hosts := list }}
{{- range $name := list $fullname (printf "%s.%s" $fullname .Release.Namespace) (printf "%s.%s.svc" $fullname .Release.Namespace) (printf "%s.%s.svc.cluster.local" $fullname .Release.Namespace) }}
{{- $hosts = append $hosts $name }}
{{- $hosts = append $hosts (printf "%s:%d" $name (int $.Values.service.port)) }}
{{- end }}
{{- /* kubectl port-forward and in-pod checks send a loopback Host. */}}
{{- range $name := list "127.0.0.1" "localhost" }}
{{- $hosts = append $hosts (printf "%s:%d" $name (int $.Values.containerPort)) }}
{{- end }}
{{- $hosts = concat $hosts .Values.extraAllowedHosts }}
{{- $_ := set $server "allowed_hosts" $hosts }}
{{- end }}
{{- if not (hasKey $server "drain") }}
{{- $_ := set $server "drain" (dict "delay" (printf "%ds" (int .Values.drain.delaySeconds)) "timeout" (printf "%ds" (int .Values.drain.timeoutSeconds))) }}
{{- end }}
{{- if gt (int .Values.adminPort) 0 }}
{{- $_ := set $server "admin_listen" (printf "0.0.0.0:%d" (int .Values.adminPort)) }}
{{- end }}
{{- $_ := set $cfg "server" $server }}
{{- $registry := default (dict) (get $cfg "registry") }}
{{- if not (hasKey $registry "root") }}
{{- $_ := set $registry "root" .Values.registry.mountPath }}
{{- end }}
{{- if and .Values.registry.lock (not (hasKey $registry "lock_file")) }}
{{- $_ := set $registry "lock_file" (printf "%s/providers.lock" (include "querygate.configDir" .)) }}
{{- end }}
{{- $_ := set $cfg "registry" $registry }}
{{- $audit := default (dict) (get $cfg "audit") }}
{{- if and .Values.audit.volume.enabled (ne (toString (get $audit "sink")) "postgres") }}
{{- $file := default (dict) (get $audit "file") }}
{{- if not (or (hasKey $file "dir") (hasKey $file "path")) }}
{{- $_ := set $file "dir" .Values.audit.volume.mountPath }}
{{- $_ := set $audit "file" $file }}
{{- $_ := set $cfg "audit" $audit }}
{{- end }}
{{- end }}
{{- $tenants := default (list) (get $cfg "tenants") }}
{{- range $c := .Values.credentials.tenants }}
{{- $file := printf "%s/%s/%s" (include "querygate.credentialsDir" $) $c.tenant $c.key }}
{{- $found := false }}
{{- range $t := $tenants }}
{{- if eq (toString $t.id) $c.tenant }}
{{- $found = true }}
{{- $creds := default (dict) (get $t "credentials") }}
{{- $_ := set $creds "env_file" $file }}
{{- $_ := set $t "credentials" $creds }}
{{- end }}
{{- end }}
{{- if not $found }}
{{- if eq $c.tenant "default" }}
{{- $creds := default (dict) (get $cfg "credentials") }}
{{- $_ := set $creds "env_file" $file }}
{{- $_ := set $cfg "credentials" $creds }}
{{- else }}
{{- fail (printf "credentials.tenants: tenant %q is not in config.tenants" $c.tenant) }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.database.urlSecret.secretName }}
{{- $database := default (dict) (get $cfg "database") }}
{{- if not (or (hasKey $database "url") (hasKey $database "url_file")) }}
{{- $_ := set $database "url_file" (printf "%s/%s" (include "querygate.databaseDir" .) .Values.database.urlSecret.key) }}
{{- $_ := set $cfg "database" $database }}
{{- end }}
{{- end }}
{{- if and .Values.approvalKeys.secretName .Values.approvalKeys.keys }}
{{- $approval := default (dict) (get $cfg "approval") }}
{{- if not (hasKey $approval "key_files") }}
{{- $files := list }}
{{- range $k := .Values.approvalKeys.keys }}
{{- $files = append $files (printf "%s/%s" (include "querygate.approvalKeysDir" $) $k) }}
{{- end }}
{{- $_ := set $approval "key_files" $files }}
{{- $_ := set $cfg "approval" $approval }}
{{- end }}
{{- end }}
{{- /* TLS from the mounted Secrets: filled in when config does not say, refused when config
names other files while a Secret is mounted (a mount nobody reads is a misconfiguration). */}}
{{- $server = get $cfg "server" }}
{{- if .Values.tls.secretName }}
{{- $tls := default (dict) (get $server "tls") }}
{{- $tlsDir := include "querygate.tlsDir" . }}
{{- if not (hasKey $tls "cert_file") }}
{{- $_ := set $tls "cert_file" (printf "%s/tls.crt" $tlsDir) }}
{{- end }}
{{- if not (hasKey $tls "key_file") }}
{{- $_ := set $tls "key_file" (printf "%s/tls.key" $tlsDir) }}
{{- end }}
{{- if not (and (hasPrefix (printf "%s/" $tlsDir) (toString $tls.cert_file)) (hasPrefix (printf "%s/" $tlsDir) (toString $tls.key_file))) }}
{{- fail (printf "tls.secretName mounts %s, but config.server.tls names other files (%s, %s): remove config.server.tls.cert_file/key_file (the chart fills them in) or tls.secretName" $tlsDir (toString $tls.cert_file) (toString $tls.key_file)) }}
{{- end }}
{{- $_ := set $server "tls" $tls }}
{{- end }}
{{- if .Values.tls.clientCA.secretName }}
{{- $tls := get $server "tls" }}
{{- if not $tls }}
{{- fail "tls.clientCA.secretName needs TLS: set tls.secretName (or config.server.tls)" }}
{{- end }}
{{- $caDir := include "querygate.clientCADir" . }}
{{- if not (hasKey $tls "client_ca_file") }}
{{- $_ := set $tls "client_ca_file" (printf "%s/%s" $caDir .Values.tls.clientCA.key) }}
{{- end }}
{{- if not (hasPrefix (printf "%s/" $caDir) (toString $tls.client_ca_file)) }}
{{- fail (printf "tls.clientCA.secretName mounts %s, but config.server.tls.client_ca_file is %s: remove it (the chart fills it in) or tls.clientCA.secretName" $caDir (toString $tls.client_ca_file)) }}
{{- end }}
{{- end }}
{{- $auth := default (dict) (get $cfg "auth") }}
{{- if .Values.jwt.secretName }}
{{- $jwtDir := include "querygate.jwtDir" . }}
{{- $read := false }}
{{- range $issuer := (default (list) (get (default (dict) (get $auth "jwt")) "issuers")) }}
{{- range $file := (default (list) (get $issuer "public_keys")) }}
{{- if hasPrefix (printf "%s/" $jwtDir) (toString $file) }}
{{- $read = true }}
{{- end }}
{{- end }}
{{- end }}
{{- if not $read }}
{{- fail (printf "jwt.secretName mounts %s, but no config.auth.jwt.issuers[].public_keys names a file in it: name the issuer's key file there (e.g. %s/<key>) or remove jwt.secretName" $jwtDir $jwtDir) }}
{{- end }}
{{- end }}
{{- /* The pods listen on 0.0.0.0: without authentication only when asked for by name. */}}
{{- if not (or (get $auth "jwt") (get $auth "mtls")) }}
{{- if not (or .Values.allowUnauthenticated (eq (toString (get $server "allow_unauthenticated")) "true")) }}
{{- fail "the pods would serve 0.0.0.0 without authentication: configure config.auth.jwt or config.auth.mtls (docs/identity.md), or set allowUnauthenticated: true for a trusted network (anyone who reaches the Service then acts as tenant default)" }}
{{- end }}
{{- $_ := set $server "allow_unauthenticated" true }}
{{- end }}
{{- $approvalCfg := default (dict) (get $cfg "approval") }}
{{- if and (get $approvalCfg "key_files") (ne (toString (get $approvalCfg "store")) "postgres") }}
{{- fail "approval key files (approvalKeys or config.approval.key_files) need config.approval.store: postgres, so that every replica shares one record of the approvals already used (docs/approval.md)" }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/* The container's volume mounts, the same for the server and the init containers that pull
providers with its configuration. */}}
{{- define "querygate.volumeMounts" -}}
- name: config
  mountPath: {{ include "querygate.configDir" . }}
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if ne .Values.registry.source "image" }}
- name: registry
  mountPath: {{ .Values.registry.mountPath }}
  {{- if eq .Values.registry.source "claim" }}
  readOnly: true
  {{- end }}
{{- end }}
{{- if .Values.audit.volume.enabled }}
- name: audit
  mountPath: {{ .Values.audit.volume.mountPath }}
{{- end }}
{{- range $i, $c := .Values.credentials.tenants }}
- name: credentials-{{ $i }}
  mountPath: {{ include "querygate.credentialsDir" $ }}/{{ $c.tenant }}
  readOnly: true
{{- end }}
{{- if .Values.tls.secretName }}
- name: tls
  mountPath: {{ include "querygate.tlsDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.tls.clientCA.secretName }}
- name: client-ca
  mountPath: {{ include "querygate.clientCADir" . }}
  readOnly: true
{{- end }}
{{- if .Values.jwt.secretName }}
- name: jwt
  mountPath: {{ include "querygate.jwtDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.database.urlSecret.secretName }}
- name: database-url
  mountPath: {{ include "querygate.databaseDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.approvalKeys.secretName }}
- name: approval-keys
  mountPath: {{ include "querygate.approvalKeysDir" . }}
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}
