// scan_inclusive: y[i] = x[0] + x[1] + ... + x[i], the whole array in one launch.
//
// Single pass with decoupled look-back (Merrill and Garland, 2016). Each block takes the next tile
// of TILE_ITEMS * blockDim.x elements by ticket, scans it in registers, publishes the tile's total,
// then adds up its predecessors' published values, walking back until one of them already holds its
// full prefix. Each element is read once and written once: 8 bytes of traffic per float.
//
// Launch: blockDim.x a multiple of 32 (256 suits), any grid; one block per tile,
// ceil(n / (TILE_ITEMS * blockDim.x)), is the natural size. Tiles are handed out by ticket, so a
// block only ever waits for tiles that running blocks hold: no deadlock whatever the scheduling.
//
// Provided below: the tile status words and how to read and write them. A status word packs
// (epoch, flag, value). Every launch has its own epoch, so stale words from earlier launches read as
// "not ready" and nobody has to clear the array; the last block to finish starts the next epoch and
// resets the counters. Launches of this module must not overlap.

#define TILE_ITEMS 16                       // elements per thread, as four float4
#define MAX_TILES (1 << 20)
#define FLAG_AGGREGATE 1u                   // value = the tile's own total
#define FLAG_PREFIX 2u                      // value = sum of x up to and including this tile

__device__ unsigned long long g_status[MAX_TILES];
__device__ unsigned int g_ticket = 0;       // next tile to hand out
__device__ unsigned int g_finished = 0;     // blocks that have left
__device__ unsigned int g_epoch = 1;        // 30 bits; 0 never occurs, so zeroed memory is "not ready"

__device__ __forceinline__ void publish(unsigned int tile, unsigned int epoch, unsigned int flag, float value)
{
    const unsigned long long word = ((unsigned long long)epoch << 34) | ((unsigned long long)flag << 32)
                                    | __float_as_uint(value);
    *(volatile unsigned long long*)&g_status[tile] = word;      // one 64-bit store: flag and value together
}

// flag of tile `tile` in this epoch (0: not published yet) and its value
__device__ __forceinline__ unsigned int status_of(long long tile, unsigned int epoch, float* value)
{
    if (tile < 0) {                         // before the first tile: a prefix of zero
        *value = 0.0f;
        return FLAG_PREFIX;
    }
    const unsigned long long word = *(volatile unsigned long long*)&g_status[tile];
    *value = __uint_as_float((unsigned int)word);
    return (unsigned int)(word >> 34) == epoch ? (unsigned int)(word >> 32) & 3u : 0u;
}

__device__ __forceinline__ float warp_inclusive_scan(float v, int lane)
{
    for (int d = 1; d < 32; d *= 2) {
        const float left = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d)
            v += left;
    }
    return v;
}

extern "C" __global__ void scan_inclusive(const float* __restrict__ x, float* __restrict__ y, int n)
{
    // ### BEGIN SOLUTION
    __shared__ float warp_totals[32];
    __shared__ float tile_prefix;
    __shared__ unsigned int ticket;
    const unsigned int full = 0xffffffffu;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const long long tile_elems = (long long)blockDim.x * TILE_ITEMS;
    const long long tiles = (n + tile_elems - 1) / tile_elems;
    if (tiles > MAX_TILES)
        return;
    const unsigned int epoch = *(volatile unsigned int*)&g_epoch;
    const bool vec = ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(y)) & 15) == 0;

    for (;;) {
        if (threadIdx.x == 0)
            ticket = atomicAdd(&g_ticket, 1u);
        __syncthreads();
        const unsigned int tile = ticket;
        if (tile >= tiles)
            break;

        // A warp owns 32 * TILE_ITEMS consecutive elements as TILE_ITEMS / 4 runs of 128; in each run
        // lane l holds elements 4l..4l+3, so every float4 load covers 512 contiguous bytes.
        const long long base = tile * tile_elems + (long long)warp * 32 * TILE_ITEMS + 4 * lane;
        float4 v[TILE_ITEMS / 4];
        #pragma unroll
        for (int k = 0; k < TILE_ITEMS / 4; ++k) {
            const long long i = base + 128 * k;
            if (vec && i + 3 < n)
                v[k] = *reinterpret_cast<const float4*>(x + i);
            else
                v[k] = make_float4(i < n ? x[i] : 0.0f, i + 1 < n ? x[i + 1] : 0.0f,
                                   i + 2 < n ? x[i + 2] : 0.0f, i + 3 < n ? x[i + 3] : 0.0f);
        }

        // scan the warp's runs in order: each lane's four, then across lanes, carrying the run totals
        float carry = 0.0f;
        #pragma unroll
        for (int k = 0; k < TILE_ITEMS / 4; ++k) {
            v[k].y += v[k].x;
            v[k].z += v[k].y;
            v[k].w += v[k].z;
            const float inclusive = warp_inclusive_scan(v[k].w, lane);
            float before = __shfl_up_sync(full, inclusive, 1);
            before = carry + (lane == 0 ? 0.0f : before);
            v[k].x += before; v[k].y += before; v[k].z += before; v[k].w += before;
            carry += __shfl_sync(full, inclusive, 31);
        }

        // across warps: scan the warp totals
        if (lane == 0)
            warp_totals[warp] = carry;
        __syncthreads();
        if (warp == 0)
            warp_totals[lane] = warp_inclusive_scan(lane < warps ? warp_totals[lane] : 0.0f, lane);
        __syncthreads();
        const float tile_total = warp_totals[warps - 1];
        const float warp_before = warp > 0 ? warp_totals[warp - 1] : 0.0f;

        // across tiles: warp 0 publishes this tile's total, then looks back 32 tiles at a time
        if (warp == 0) {
            float prefix = 0.0f;
            if (tile == 0) {
                if (lane == 0)
                    publish(0, epoch, FLAG_PREFIX, tile_total);
            } else {
                if (lane == 0)
                    publish(tile, epoch, FLAG_AGGREGATE, tile_total);
                long long newest = (long long)tile - 1;     // the tile lane 0 inspects
                for (;;) {
                    float value;
                    const unsigned int flag = status_of(newest - lane, epoch, &value);
                    const unsigned int ready = __ballot_sync(full, flag != 0u);
                    const unsigned int has_prefix = __ballot_sync(full, flag == FLAG_PREFIX);
                    // lanes up to the nearest tile that knows its prefix must all have published
                    const int stop = has_prefix ? __ffs(has_prefix) - 1 : 31;
                    const unsigned int needed = stop == 31 ? full : (2u << stop) - 1u;
                    if ((ready & needed) != needed)
                        continue;                           // a predecessor is still scanning: look again
                    float part = lane <= stop ? value : 0.0f;
                    for (int off = 16; off > 0; off >>= 1)
                        part += __shfl_xor_sync(full, part, off);
                    prefix += part;
                    if (has_prefix)
                        break;
                    newest -= 32;
                }
                if (lane == 0)
                    publish(tile, epoch, FLAG_PREFIX, prefix + tile_total);
            }
            if (lane == 0)
                tile_prefix = prefix;
        }
        __syncthreads();

        const float add = tile_prefix + warp_before;
        #pragma unroll
        for (int k = 0; k < TILE_ITEMS / 4; ++k) {
            const long long i = base + 128 * k;
            const float4 o = make_float4(v[k].x + add, v[k].y + add, v[k].z + add, v[k].w + add);
            if (vec && i + 3 < n) {
                *reinterpret_cast<float4*>(y + i) = o;
            } else {
                if (i < n) y[i] = o.x;
                if (i + 1 < n) y[i + 1] = o.y;
                if (i + 2 < n) y[i + 2] = o.z;
                if (i + 3 < n) y[i + 3] = o.w;
            }
        }
        // no barrier needed here: the next write to `ticket` comes before a barrier every thread
        // passes only after it is done with this tile's shared values
    }

    // the last block out starts the next launch's epoch
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&g_finished, 1u) == gridDim.x - 1) {
            g_ticket = 0;
            g_finished = 0;
            const unsigned int next = (epoch + 1) & ((1u << 30) - 1);
            g_epoch = next ? next : 1;
            __threadfence();
        }
    }
    // ### END SOLUTION
}
