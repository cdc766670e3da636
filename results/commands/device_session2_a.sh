export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
A=/tmp/A; mkdir -p $A/cudnn $A/fmnist
timeout 170 carry/gpu_tests > $A/gpu_tests.log 2>&1; echo "gpu_tests exit $?" >> $A/gpu_tests.log
timeout 60 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests > $A/gpu_mpi.log 2>&1; echo "gpu_mpi_tests exit $?" >> $A/gpu_mpi.log
SKIP_TESTS=1 OUT=$A/cudnn timeout 170 bash results/commands/device_cudnn.sh > $A/cudnn/stdout.txt 2>&1
OUT=$A/fmnist timeout 150 bash results/commands/device_fmnist.sh carry/fmnist carry/vitddp > $A/fmnist/stdout.txt 2>&1
tar czf $OUT/A.tgz -C $A .
grep -E "FAILED|failed|test cases|exit" $A/gpu_tests.log | tail -25; tail -3 $A/gpu_mpi.log; tail -30 $A/cudnn/stdout.txt; tail -25 $A/fmnist/stdout.txt
