# The ferry image: the CronJob of `ferry schedule` runs it, and so do mover pods (`ferry mover ...`).
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t ferry:dev .
# A static binary (no cgo) on an empty base, run as a non-root user.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# As the Makefile builds it: the version stamped into internal/buildinfo.
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/ferrykube/ferry/internal/buildinfo.version=${VERSION}" \
      -o /out/ferry ./cmd/ferry

FROM scratch
# CA certificates for TLS to S3 and the API server; nothing else from the build stage.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/ferry /usr/local/bin/ferry
# Mover pods and the CronJob run `ferry` by name.
ENV PATH=/usr/local/bin
# The numeric user the CronJob and restricted mover pods run as; scratch has no /etc/passwd.
USER 65532:65532
ENTRYPOINT ["ferry"]
