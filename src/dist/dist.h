/* The data-parallel layer's internals (built only with MPI): the handle,
 * the all-reduce of one float buffer in fp32 or 8 bits as a non-blocking
 * state machine (allreduce.c), and the gradient buckets (replica.c). */
#ifndef ACTC_DIST_H
#define ACTC_DIST_H
#include "actc.h"
#include <mpi.h>
#include <stdint.h>

/* 8 bits: block b (ACTC_DYN8_BLOCK values from b x ACTC_DYN8_BLOCK) of
 * the buffer as codes that exist already, a gradient held in 8 bits: its
 * absmax into *absmax and its codes into codes (the block's length; the
 * padding after a parameter as actc_dyn8_zero_code), returning 1; or 0 for
 * a block whose values are to be encoded from x. */
typedef int (*actc__codes_fn)(void *user, size_t b, float *absmax, uint8_t *codes);

/* One all-reduce in flight over x[0..n). */
typedef struct {
    int bits;                  /* 32 or 8                                     */
    float *x;
    size_t n;
    actc__codes_fn codes;      /* 8 bits: the blocks sent as they are, or NULL */
    void *codes_user;
    int phase;                 /* AR_IDLE, AR_SPREAD, AR_SUMMED (8 bits: the
                                  all-to-all is done, the all-gather waits its
                                  turn), AR_GATHER, AR_DONE                   */
    MPI_Request req;
    int *cnt;                  /* 6 x P ints: send, its displacements, receive,
                                  its displacements, gather, its displacements */
    uint8_t *sbuf, *rbuf, *gbuf; /* ACTC_MEM_COMM                             */
    size_t sent;               /* bytes handed to MPI (a ring's for fp32)     */
} actc__allreduce;
enum { AR_IDLE = 0, AR_SPREAD, AR_SUMMED, AR_GATHER, AR_DONE };

/* A run of parameters whose gradients travel together. */
typedef struct {
    int first, count;          /* positions in actc_dist.order                 */
    int ready;                 /* of them complete this step                  */
    float *buf;                /* their gradients, packed (ACTC_MEM_COMM)     */
    size_t *off;               /* count + 1 offsets into buf (slot_len)       */
    actc_dist *d;              /* the handle (for the codes callback)         */
    actc__allreduce ar;
} actc__bucket;

struct actc_dist {
    MPI_Comm comm;             /* a duplicate: its own error handler          */
    MPI_Comm ping;             /* another, for the liveness pings of a wait
                                  past the timeout (wait.c)                   */
    double timeout_s;          /* a wait's limit (0: none)                    */
    MPI_Comm gather;           /* another, for the 8-bit all-gathers: MPI
                                  matches collectives per communicator in the
                                  order ranks start them, and an all-gather
                                  starts when its all-to-all is seen done,
                                  which differs between ranks                 */
    int rank, size, own_mpi;
    actc_trainer *t;
    actc_dist_opts o;
    actc_tensor **params;
    int np;
    int *order;                /* parameter indices, last first               */
    int *bucket_of;            /* per parameter index                         */
    actc__bucket *b;
    int nb, next;              /* buckets; the next to start                  */
    uint64_t step;             /* the trainer's step the buckets are for      */
    int broken;                /* a failed step left collectives in flight:
                                  nothing more can be exchanged, and the
                                  communicators cannot be freed               */
    double t_start;            /* the step's first bucket started             */
    actc_dist_stats st;
};

/* A pipeline (pipe.c): this rank's place in the grid of stages x replicas. */
struct actc_pipe {
    actc_dist *pp;        /* this replica's stages: its rank is the stage     */
    actc_dist *dp;        /* this stage's replicas (NULL: one)               */
    int stage, stages;
    int *shared;          /* parameters tied to the other end's copy          */
    int n_shared;
    actc_trainer *t;
};

/* Make t's group this communicator (comm.c). */
actc_status actc__dist_set_group(actc_dist *d, actc_trainer *t);
/* Wait for req to complete, answering the other ranks' pings; past the
 * handle's timeout, ACTC_ERR_COMM naming the ranks that do not answer
 * (what: the exchange, for the message), and the handle is broken. */
actc_status actc__dist_wait(actc_dist *d, MPI_Request *req, const char *what);
/* ACTC_ERR_COMM with MPI's message for rc (what: the call). */
actc_status actc__mpi_error(int rc, const char *what);
/* Start the sum of x[0..n) over the ranks (bits 32 or 8).  In 8 bits the
 * blocks codes(user) gives are sent as those codes (NULL: every block
 * encoded from x); x must then hold their decoded values. */
actc_status actc__allreduce_start(actc_dist *d, actc__allreduce *a, int bits, float *x, size_t n,
                                  actc__codes_fn codes, void *user);
/* A done 8-bit all-reduce's sum as codes: block b's absmax, *codes and
 * *len (what the all-gather delivered, which x holds decoded). */
float actc__allreduce_block(const actc_dist *d, const actc__allreduce *a, size_t b, const uint8_t **codes,
                            size_t *len);
/* Move a forward: test its request (wait: until it is AR_DONE).  An 8-bit
 * one starts its all-gather only with may_gather (its turn: every earlier
 * one has started its own); wait implies it. */
actc_status actc__allreduce_progress(actc_dist *d, actc__allreduce *a, int wait, int may_gather);
/* Free its buffers (the request must be complete). */
void actc__allreduce_release(actc__allreduce *a);
#endif
