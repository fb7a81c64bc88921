module s3slice.local/pacer

go 1.22
