# Sourced on the lent GPU machine, from the repository root, after pack.sh's parts were copied
# to /tmp/parts: unpacks them (once) into /tmp/g, puts them on PYTHONPATH, points TensorFlow's
# CUDA 12 library names at the machine's CUDA 13 libraries (TensorFlow 2.21 was built against
# CUDA 12.5.1; its libcudart 12 comes in the parts) and puts a `python` on PATH.
G=/tmp/g
if [ ! -e $G/site/site312/tensorflow ]; then
  mkdir -p $G/site && cat /tmp/parts/p?? | xz -dc -T16 | tar -x -C $G/site
fi
export PYTHONPATH=$G/site/site312 TF_USE_LEGACY_KERAS=1
mkdir -p $G/bin $G/cu12
rm -f $G/bin/python
printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" > $G/bin/python
chmod +x $G/bin/python
export PATH=$G/bin:$PATH
roots="$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' | sed 's|\( \|$\)|/nvidia |g') /usr/local/cuda/lib64"
libs=$(find $roots -name 'lib*.so*' 2>/dev/null)
dirs=$(for f in $libs; do dirname $f; done | sort -u | tr '\n' ':')
ln -sf $(find $G/site/site312/nvidia -name 'libcudart.so.12*' | head -1) $G/cu12/libcudart.so.12
for pair in libcublas.so.12:libcublas.so.13 libcublasLt.so.12:libcublasLt.so.13 \
            libcufft.so.11:libcufft.so.12 libcusolver.so.11:libcusolver.so.12 \
            libcusparse.so.12:libcusparse.so.12 libcudnn.so.9:libcudnn.so.9 \
            libnccl.so.2:libnccl.so.2 libcupti.so.12:libcupti.so.13 \
            libnvJitLink.so.12:libnvJitLink.so.13 libcurand.so.10:libcurand.so.10; do
  found=$(echo "$libs" | grep "/${pair##*:}" | head -1)
  if [ -n "$found" ]; then ln -sf "$found" $G/cu12/${pair%%:*}; else echo "env.sh: no ${pair##*:}"; fi
done
export LD_LIBRARY_PATH=$G/cu12:$dirs${LD_LIBRARY_PATH:-}
