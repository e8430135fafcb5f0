#include "alloc_table.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Open addressing with linear probing and backward-shift deletion (no tombstones). */
typedef struct {
    alloc_rec *slots; /* key 0 = empty; no allocation returns a 0 handle */
    size_t cap;       /* power of two */
    size_t n;
} table;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static table g_tab[TBL_COUNT];

static size_t hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

static int grow(table *t)
{
    size_t ncap = t->cap ? t->cap * 2 : 64;
    alloc_rec *ns = calloc(ncap, sizeof *ns);
    if (ns == NULL)
        return -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i].key == 0)
            continue;
        size_t j = hash(t->slots[i].key) & (ncap - 1);
        while (ns[j].key)
            j = (j + 1) & (ncap - 1);
        ns[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = ns;
    t->cap = ncap;
    return 0;
}

static long find(const table *t, uint64_t key)
{
    if (t->cap == 0)
        return -1;
    size_t i = hash(key) & (t->cap - 1);
    while (t->slots[i].key) {
        if (t->slots[i].key == key)
            return (long)i;
        i = (i + 1) & (t->cap - 1);
    }
    return -1;
}

static void erase(table *t, size_t i)
{
    size_t mask = t->cap - 1;
    t->slots[i].key = 0;
    t->n--;
    for (size_t j = (i + 1) & mask; t->slots[j].key; j = (j + 1) & mask) {
        size_t home = hash(t->slots[j].key) & mask;
        /* Move j back into the hole at i if its probe path passes through i. */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            t->slots[i] = t->slots[j];
            t->slots[j].key = 0;
            i = j;
        }
    }
}

int atab_put(alloc_kind k, const alloc_rec *rec, alloc_rec *old)
{
    if (rec->key == 0)
        return 0;
    pthread_mutex_lock(&g_mu);
    table *t = &g_tab[k];
    int replaced = 0;
    long i = find(t, rec->key);
    if (i >= 0) {
        if (old)
            *old = t->slots[i];
        t->slots[i] = *rec;
        replaced = 1;
    } else if ((t->n + 1) * 2 <= t->cap || grow(t) == 0) {
        size_t j = hash(rec->key) & (t->cap - 1);
        while (t->slots[j].key)
            j = (j + 1) & (t->cap - 1);
        t->slots[j] = *rec;
        t->n++;
    }
    pthread_mutex_unlock(&g_mu);
    return replaced;
}

int atab_take(alloc_kind k, uint64_t key, alloc_rec *out)
{
    pthread_mutex_lock(&g_mu);
    table *t = &g_tab[k];
    long i = find(t, key);
    if (i >= 0) {
        *out = t->slots[i];
        erase(t, (size_t)i);
    }
    pthread_mutex_unlock(&g_mu);
    return i >= 0;
}

int atab_get(alloc_kind k, uint64_t key, alloc_rec *out)
{
    pthread_mutex_lock(&g_mu);
    long i = find(&g_tab[k], key);
    if (i >= 0)
        *out = g_tab[k].slots[i];
    pthread_mutex_unlock(&g_mu);
    return i >= 0;
}

void atab_drop_ctx(alloc_kind k, CUcontext ctx, void (*fn)(const alloc_rec *))
{
    pthread_mutex_lock(&g_mu);
    table *t = &g_tab[k];
    for (size_t i = 0; i < t->cap;) {
        if (t->slots[i].key && t->slots[i].ctx == ctx) {
            alloc_rec r = t->slots[i];
            erase(t, i);
            fn(&r);
            continue; /* erase() may have shifted another record into slot i */
        }
        i++;
    }
    pthread_mutex_unlock(&g_mu);
}

void atab_reset_after_fork(void)
{
    /* Another parent thread may have been resizing: start from fresh tables (the
     * parent's buffers are left alone, they are the parent's). */
    pthread_mutex_init(&g_mu, NULL);
    memset(g_tab, 0, sizeof g_tab);
}
