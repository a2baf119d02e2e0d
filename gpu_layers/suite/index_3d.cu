// 3D blocks in a 3D grid: block/thread coordinates, a transposed write and the launch dimensions.
extern "C" __global__ void index_3d(int* ids, int* transposed, int* dims)
{
    int nx = gridDim.x * blockDim.x, ny = gridDim.y * blockDim.y, nz = gridDim.z * blockDim.z;
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    int lin = (z * ny + y) * nx + x;
    int block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    int thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    ids[lin] = block * 1000 + thread;
    transposed[(x * ny + y) * nz + z] = lin;
    if (lin == 0) {
        dims[0] = gridDim.x; dims[1] = gridDim.y; dims[2] = gridDim.z;
        dims[3] = blockDim.x; dims[4] = blockDim.y; dims[5] = blockDim.z;
    }
}
