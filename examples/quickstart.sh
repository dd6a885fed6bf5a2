#!/bin/sh
echo "quickstart: not yet"
