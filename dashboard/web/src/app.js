// The dashboard's app (work in progress)
